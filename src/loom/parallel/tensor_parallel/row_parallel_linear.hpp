// RowParallelLinear: y = x W^T + b with W's columns (input features) split across the
// tensor-parallel group: each rank multiplies its slice of the input (the output of a
// column-parallel layer, never gathered) and the g operator sums the partial outputs. The
// bias is replicated and added once, after the sum; its gradient is the same on every rank
// (under sequence parallelism each rank's is partial, from its chunk of the sequence, and the
// replicated-gradient sum of sequence_parallel.hpp completes it).
// Overlap (tp_overlap, under sequence parallelism): the GEMM runs in pieces of rows, each
// piece's partial outputs reduce-scattered while the next is computed; backward gathers the
// output gradient while this rank's own chunk of dX is computed. The blocking path runs the
// same GEMMs and collectives, each waited for at once, so both give the same bits.
#pragma once

#include "loom/comm/process_group.hpp"
#include "loom/nn/linear.hpp"

namespace loom::parallel::tp {

class RowParallelLinear : public nn::Linear {
 public:
  // sequence_parallel: the partial outputs are reduce-scattered along the sequence
  // (B, T/t, C), and the output gradient all-gathered in backward.
  RowParallelLinear(int64_t in_features, int64_t out_features, comm::ProcessGroup& group,
                    bool sequence_parallel = false, bool overlap = false);

  // Pieces of rows the forward GEMM and its reduce-scatter are split into (fewer when a
  // rank's chunk has fewer rows): the last piece's reduce-scatter is the exposed part.
  static constexpr int64_t kPieces = 4;

 protected:
  Tensor forward_impl(const Tensor& x, nn::Context& ctx) override;  // x (N, C/t) -> (N, OC)
  Tensor backward_impl(const Tensor& dy, nn::Context& ctx) override;

 private:
  // g forward under sequence parallelism: x W^T reduce-scattered along the sequence.
  Tensor project_and_reduce_scatter(const Tensor& x);

  comm::ProcessGroup& group_;
  bool sequence_parallel_;
  bool overlap_;
};

}  // namespace loom::parallel::tp
