#include "loom/nn/node_cross_entropy.hpp"

#include <algorithm>
#include <vector>

#include "loom/error.hpp"
#include "loom/kernels/cross_entropy.hpp"

namespace loom::nn {

NodeLoss node_cross_entropy(Tensor& logits, const Tensor& targets, bool backward, float scale) {
  check(logits.ndim() == 2 && targets.dtype() == DType::I32 && targets.numel() == logits.size(0),
        "node cross-entropy: logits ", shape_str(logits.shape()), " do not match targets ", shape_str(targets.shape()));
  const int64_t N = logits.size(0), K = logits.size(1);
  const int32_t* t = targets.i32();
  // The counted rows gathered, so the fused kernel runs on them alone.
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < N; ++i) {
    check(t[i] >= -1 && t[i] < K, "node ", i, ": class ", t[i], " out of range [0, ", K, ")");
    if (t[i] >= 0) rows.push_back(i);
  }
  NodeLoss out;
  out.count = static_cast<int64_t>(rows.size());
  check(out.count > 0, "node cross-entropy: no labelled node in this split");
  const int64_t M = out.count;
  std::vector<float> picked(static_cast<size_t>(M * K));  // (M, K)
  std::vector<int32_t> picked_targets(static_cast<size_t>(M));
  float* x = logits.f32();
  for (int64_t m = 0; m < M; ++m) {
    const float* row = x + rows[static_cast<size_t>(m)] * K;
    std::copy(row, row + K, picked.data() + m * K);
    picked_targets[static_cast<size_t>(m)] = t[rows[static_cast<size_t>(m)]];
    out.correct += std::max_element(row, row + K) - row == t[rows[static_cast<size_t>(m)]] ? 1 : 0;
  }
  std::vector<float> losses(static_cast<size_t>(M));
  kernels::cross_entropy_forward(losses.data(), picked.data(), picked_targets.data(), M, K, K);
  double sum = 0.0;  // in order: the same for any thread count
  for (float l : losses) sum += l;
  out.loss = static_cast<float>(sum / static_cast<double>(M));
  if (backward) {
    kernels::cross_entropy_backward(picked.data(), picked_targets.data(), scale / static_cast<float>(M), M, K, K);
    std::fill(x, x + N * K, 0.0f);
    for (int64_t m = 0; m < M; ++m)
      std::copy(picked.data() + m * K, picked.data() + (m + 1) * K, x + rows[static_cast<size_t>(m)] * K);
  }
  return out;
}

}  // namespace loom::nn
