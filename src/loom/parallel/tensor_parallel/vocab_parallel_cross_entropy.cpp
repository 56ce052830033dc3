#include "loom/parallel/tensor_parallel/vocab_parallel_cross_entropy.hpp"

#include <algorithm>
#include <cmath>

#include "loom/error.hpp"
#include "loom/kernels/fast_math.hpp"

namespace loom::parallel::tp {

float VocabParallelCrossEntropy::forward(const Tensor& logits, const Tensor& targets) {
  check(targets.dtype() == DType::I32 && logits.ndim() == 3 && targets.numel() * logits.size(2) == logits.numel(),
        "cross-entropy: logits ", shape_str(logits.shape()), " do not match targets ", shape_str(targets.shape()));
  const int64_t N = targets.numel(), Vl = logits.size(2);
  const int64_t real = std::clamp<int64_t>(V_ - vocab_begin_, 0, Vl);  // this rank's real columns
  const int32_t* t = targets.i32();
  for (int64_t i = 0; i < N; ++i) check(t[i] >= 0 && t[i] < V_, "target token id ", t[i], " out of range [0, ", V_, ")");
  const float* x = logits.f32();
  max_.assign(static_cast<size_t>(N), -INFINITY);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < real; ++j) max_[n] = std::max(max_[n], x[n * Vl + j]);
  // The loss's statistics are reduced in fp32 even when activations cross the wire in bf16
  // (comm/activation_wire.hpp): a bf16 max would shift every exponent by up to 2^-8 of the
  // logit, and the sums of exponentials and the target logit are the loss itself, which
  // mixed precision computes in fp32 as the serial run does.
  group_.all_reduce(max_.data(), N, comm::ReduceOp::Max);
  // One all-reduce for both: per row, the sum of exponentials and the target's logit.
  std::vector<float> partial(static_cast<size_t>(2 * N), 0.0f);
  for (int64_t n = 0; n < N; ++n) {
    float s = 0.0f;
    for (int64_t j = 0; j < real; ++j) s += kernels::fast_exp(x[n * Vl + j] - max_[n]);
    partial[n] = s;
    const int64_t col = t[n] - vocab_begin_;
    if (col >= 0 && col < real) partial[N + n] = x[n * Vl + col] - max_[n];
  }
  group_.all_reduce(partial.data(), 2 * N, comm::ReduceOp::Sum);
  sum_.assign(partial.begin(), partial.begin() + N);
  double loss = 0.0;  // in row order, so the mean is the same on every rank
  for (int64_t n = 0; n < N; ++n) loss += std::log(partial[n]) - partial[N + n];
  return static_cast<float>(loss / static_cast<double>(N));
}

void VocabParallelCrossEntropy::backward(Tensor& logits, const Tensor& targets, float scale) {
  const int64_t N = targets.numel(), Vl = logits.size(2);
  check(static_cast<int64_t>(max_.size()) == N, "vocab-parallel cross-entropy: backward without its forward");
  const int64_t real = std::clamp<int64_t>(V_ - vocab_begin_, 0, Vl);
  const float dloss = scale / static_cast<float>(N);
  const int32_t* t = targets.i32();
  float* x = logits.f32();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* row = x + n * Vl;
    const float s = dloss / sum_[n];
    for (int64_t j = 0; j < real; ++j) row[j] = kernels::fast_exp(row[j] - max_[n]) * s;
    for (int64_t j = real; j < Vl; ++j) row[j] = 0.0f;  // padding
    const int64_t col = t[n] - vocab_begin_;
    if (col >= 0 && col < real) row[col] -= dloss;
  }
}

}  // namespace loom::parallel::tp
