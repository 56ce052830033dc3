// Softmax cross-entropy over logits split by vocabulary across the tensor-parallel group,
// without ever gathering them (Megatron-LM): per row, the ranks all-reduce the max (for a
// stable softmax), then the sum of exponentials and the target's logit (held by one rank).
// Every rank gets the same loss; backward writes each rank's slice of dlogits in place, as
// the serial loss does.
#pragma once

#include <vector>

#include "loom/comm/process_group.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom::parallel::tp {

class VocabParallelCrossEntropy {
 public:
  // This rank's logits are vocabulary columns [vocab_begin, vocab_begin + Vl) of V real
  // tokens (columns >= V are padding and ignored).
  VocabParallelCrossEntropy(int64_t V, int64_t vocab_begin, comm::ProcessGroup& group)
      : V_(V), vocab_begin_(vocab_begin), group_(group) {}

  // Mean loss of logits (B, T, Vl) against targets (B, T) in [0, V); keeps the row
  // statistics for backward.
  float forward(const Tensor& logits, const Tensor& targets);
  // In place: logits become dlogits of loss * scale (the statistics of the last forward).
  void backward(Tensor& logits, const Tensor& targets, float scale);

 private:
  int64_t V_, vocab_begin_;
  comm::ProcessGroup& group_;
  std::vector<float> max_, sum_;  // per row: global max and sum of exp(logit - max)
};

}  // namespace loom::parallel::tp
