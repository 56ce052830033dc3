// ColumnParallelLinear: y = x W^T + b with W's rows (output features) split across the
// tensor-parallel group, so each rank computes its slice of the outputs from the whole,
// replicated input. The f operator sums the partial input gradients in backward. With
// blocks > 1 each of that many equal blocks of outputs is split separately: a fused QKV
// projection gives every rank the q, k and v columns of its own heads. Under sequence
// parallelism f is an all-gather of the sequence chunks and its backward a reduce-scatter.
// Overlap (tp_overlap): under sequence parallelism the GEMM runs one rank's chunk of rows at a
// time, this rank's own first while the others' are gathered; backward gathers x under the
// dX GEMM and reduce-scatters dX under the dW GEMM; without it, dX's all-reduce runs under the
// dW GEMM (Megatron's asynchronous gradient all-reduce). The blocking path runs the same GEMMs
// and collectives, each collective waited for at once, so both give the same bits.
#pragma once

#include "loom/comm/process_group.hpp"
#include "loom/nn/linear.hpp"

namespace loom::parallel::tp {

class ColumnParallelLinear : public nn::Linear {
 public:
  // sequence_parallel: the input arrives split along the sequence (B, T/t, C) and is
  // all-gathered (only this rank's chunk is kept for backward, which gathers it again).
  // gather_output: all-gather the ranks' output features into the whole (N, OC) output
  // (backward then keeps this rank's slice of the output gradient), for a column-parallel
  // layer not followed by a row-parallel one.
  ColumnParallelLinear(int64_t in_features, int64_t out_features, int64_t blocks, comm::ProcessGroup& group,
                       bool sequence_parallel = false, bool gather_output = false, bool overlap = false);

 protected:
  Tensor forward_impl(const Tensor& x, nn::Context& ctx) override;  // x (N, C) -> (N, OC/t)
  Tensor backward_impl(const Tensor& dy, nn::Context& ctx) override;

 private:
  // f forward under sequence parallelism: gather(x) W^T + b, as a GEMM per rank's chunk.
  Tensor gather_and_project(const Tensor& x);

  comm::ProcessGroup& group_;
  bool sequence_parallel_;
  bool gather_output_;
  bool overlap_;
  int64_t blocks_;
};

}  // namespace loom::parallel::tp
