// Softmax cross-entropy fused with the logits gradient: the backward overwrites the logits
// in place with dlogits, so the (N, V) buffer is never duplicated.
#pragma once

#include <cstdint>

namespace loom::kernels {

// losses (N) = -log softmax(logits)[target]; logits (N, Vp) row stride Vp, only the first V
// columns are real (the rest is vocabulary padding and ignored); targets (N) in [0, V).
void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t N,
                           int64_t V, int64_t Vp);
// In place: logits (N, Vp) becomes dlogits = (softmax - onehot(target)) * dloss,
// where dloss is the same for every row (1/N for a mean loss); padding columns become 0.
void cross_entropy_backward(float* logits, const int32_t* targets, float dloss, int64_t N, int64_t V,
                            int64_t Vp);

}  // namespace loom::kernels
