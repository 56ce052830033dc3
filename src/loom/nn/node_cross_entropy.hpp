// The GCN's loss: softmax cross-entropy averaged over the labelled nodes of one split (the
// others' targets are -1 and take no part), and how many of them the logits classify right.
// NodeCrossEntropy computes it on the model's output as the layer builder lays it out: the
// whole logits serially, a parallel builder's blocks otherwise (graph_3d).
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

class NodeCrossEntropy {
 public:
  virtual ~NodeCrossEntropy() = default;
  // logits: the model's output (serial: the whole (N, K)); targets (N) as above, on every
  // rank. With backward, logits become the gradient of loss * scale in place.
  virtual NodeLoss operator()(Tensor& logits, const Tensor& targets, bool backward, float scale) const {
    return node_cross_entropy(logits, targets, backward, scale);
  }
};

}  // namespace loom::nn
