#include "loom/nn/cross_entropy_loss.hpp"

#include <cmath>

#include "loom/error.hpp"
#include "loom/kernels/cross_entropy.hpp"

namespace loom::nn {

namespace {
void check_targets(const Tensor& logits, const Tensor& targets, int64_t V) {
  check(targets.dtype() == DType::I32 && logits.ndim() == 3 && targets.numel() * logits.size(2) == logits.numel(),
        "cross-entropy: logits ", shape_str(logits.shape()), " do not match targets ", shape_str(targets.shape()));
  const int32_t* t = targets.i32();
  for (int64_t i = 0; i < targets.numel(); ++i)
    check(t[i] >= 0 && t[i] < V, "target token id ", t[i], " out of range [0, ", V, ")");
}
}  // namespace

float cross_entropy_loss(const Tensor& logits, const Tensor& targets, int64_t V) {
  check_targets(logits, targets, V);
  const int64_t N = targets.numel(), Vp = logits.size(2);
  Tensor losses = Tensor::empty({N});  // (N)
  kernels::cross_entropy_forward(losses.f32(), logits.f32(), targets.i32(), N, V, Vp);
  double sum = 0.0;  // in order, so the mean is the same for any thread count
  for (int64_t i = 0; i < N; ++i) sum += losses.f32()[i];
  return static_cast<float>(sum / static_cast<double>(N));
}

void cross_entropy_loss_backward(Tensor& logits, const Tensor& targets, int64_t V, float scale) {
  const int64_t N = targets.numel(), Vp = logits.size(2);
  kernels::cross_entropy_backward(logits.f32(), targets.i32(), scale / static_cast<float>(N), N, V, Vp);
}

}  // namespace loom::nn
