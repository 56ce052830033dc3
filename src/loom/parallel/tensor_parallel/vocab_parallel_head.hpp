// The tied LM head over a vocabulary split across the tensor-parallel group (the f operator
// around it): every rank multiplies the whole sequence by its vocabulary rows of the token
// table, so its input gradient is partial and summed over the group. Under sequence
// parallelism the input (the final LayerNorm's output) arrives split along the sequence and
// is all-gathered, and the input gradient is reduce-scattered back to the ranks' chunks.
// Overlap (tp_overlap): the logits GEMM runs one rank's chunk at a time, this rank's own while
// the others are gathered; backward gathers the kept input under the dX GEMMs and
// reduce-scatters (without sequence parallelism: all-reduces) dX under the dW GEMMs. The
// blocking path runs the same GEMMs and collectives, each waited for at once: the same bits.
#pragma once

#include "loom/comm/process_group.hpp"
#include "loom/nn/parameter.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom::parallel::tp {

struct VocabParallelHead {
  comm::ProcessGroup& group;
  bool sequence_parallel;
  bool overlap;

  // x (B, T/t, C) under sequence parallelism, else (B, T, C) -> this rank's logits (B, T, V/t).
  Tensor logits(const Tensor& x, nn::Parameter& w) const;
  // kept: what forward kept of x (this rank's chunk under sequence parallelism); returns
  // x's gradient summed over the group, in x's shape.
  Tensor backward(const Tensor& dlogits, const Tensor& kept, nn::Parameter& w) const;
};

}  // namespace loom::parallel::tp
