// The conjugate operators of Megatron-style tensor parallelism (Shoeybi et al. 2019, fig. 3),
// the only places a tensor-parallel layer communicates:
//   f: before a column-parallel layer; identity forward, all-reduce of the input gradient
//      in backward (each rank's gradient is partial: it saw only its output features);
//   g: after a row-parallel layer; all-reduce of the partial outputs in forward, identity
//      backward.
// Sums run in rank order on every rank, so the replicas stay bit-identical.
#pragma once

#include "loom/comm/process_group.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom::parallel::tp {

// f's backward: dx becomes the sum of the group's partial input gradients.
void f_backward(Tensor& dx, comm::ProcessGroup& group);
// g's forward: y becomes the sum of the group's partial outputs.
void g_forward(Tensor& y, comm::ProcessGroup& group);

}  // namespace loom::parallel::tp
