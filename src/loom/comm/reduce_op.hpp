// Reduction operators of the collectives and the element-wise step every algorithm shares.
// Avg is a sum followed by one division by the group size, so all algorithms agree on it.
#pragma once

#include <cstdint>
#include <string>

#include <mpi.h>

namespace loom::comm {

enum class ReduceOp { Sum, Avg, Max };

std::string reduce_op_name(ReduceOp op);
// dst[i] = dst[i] (op) src[i] for Sum/Avg (a sum) and Max.
void reduce_into(float* dst, const float* src, int64_t n, ReduceOp op);
// The MPI operator implementing op's combining step (MPI_SUM for Avg).
MPI_Op mpi_op(ReduceOp op);
// Divides by group size for Avg; nothing for the others.
void finish_reduction(float* data, int64_t n, ReduceOp op, int group_size);

}  // namespace loom::comm
