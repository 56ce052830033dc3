// Mean softmax cross-entropy over the real vocabulary (padding columns ignored), with the
// backward written in place over the logits so the (N, Vp) buffer exists once.
#pragma once

#include "loom/tensor/tensor.hpp"

namespace loom::nn {

// Mean loss of logits (B, T, Vp) against targets (B, T) i32 in [0, V).
float cross_entropy_loss(const Tensor& logits, const Tensor& targets, int64_t V);
// logits becomes dlogits for loss * scale, where scale is usually 1 / micro-batches
// (the mean over rows is already included).
void cross_entropy_loss_backward(Tensor& logits, const Tensor& targets, int64_t V, float scale);

}  // namespace loom::nn
