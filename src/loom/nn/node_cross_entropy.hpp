// The GCN's loss: softmax cross-entropy averaged over the labelled nodes of one split (the
// others' targets are -1 and take no part), and how many of them the logits classify right.
#pragma once

#include <cstdint>

#include "loom/tensor/tensor.hpp"

namespace loom::nn {

struct NodeLoss {
  float loss = 0.0f;    // mean over the counted nodes
  int64_t correct = 0;  // counted nodes whose largest logit is their class
  int64_t count = 0;    // nodes with a target >= 0
};

// logits (N, K), targets (N) i32 in [0, K) or -1. With backward, logits become
// d(loss * scale)/d(logits) in place (zero on the rows not counted).
NodeLoss node_cross_entropy(Tensor& logits, const Tensor& targets, bool backward, float scale);

}  // namespace loom::nn
