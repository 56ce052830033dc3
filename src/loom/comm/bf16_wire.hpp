// bf16 on the wire: what MPI needs to move and reduce bf16 values (it has no bf16 type or
// operator of its own) and the conversions around it. A reduction adds two bf16 values in
// fp32 and rounds the sum back to bf16, as NCCL's bf16 reductions do; the data-parallel
// average of fp32 gradients sent this way carries one bf16 rounding per element per hop.
#pragma once

#include <cstdint>
#include <vector>

#include <mpi.h>

#include "loom/comm/reduce_op.hpp"
#include "loom/tensor/dtype.hpp"

namespace loom::comm {

// A committed MPI type of one bf16 (2 bytes) and its Sum/Avg (a sum) and Max operators;
// created once, on first use, after MPI_Init.
MPI_Datatype bf16_mpi_type();
MPI_Op bf16_mpi_op(ReduceOp op);

std::vector<bfloat16> to_bf16_vector(const float* src, int64_t n);
// dst[i] = bf16(src[i]) (round to nearest even).
void pack_bf16(const float* src, bfloat16* dst, int64_t n);
// dst[i] = float(src[i]).
void widen_bf16(const bfloat16* src, float* dst, int64_t n);

}  // namespace loom::comm
