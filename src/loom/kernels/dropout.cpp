#include "loom/kernels/dropout.hpp"

#include "loom/kernels/dropout_hash.hpp"

namespace loom::kernels {

namespace {

constexpr int64_t kDropoutParallelMin = 1 << 16;

}  // namespace

uint64_t dropout_key(uint64_t seed, uint64_t step, uint64_t layer) {
  return dropout_mix(dropout_mix(dropout_mix(seed) ^ step) ^ layer);
}

void dropout_forward(float* out, float* mask, const float* x, int64_t n, float p, uint64_t key) {
  const uint64_t threshold = dropout_threshold(p);
  const float scale = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static) if (n >= kDropoutParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    mask[i] = dropout_keeps(key, static_cast<uint64_t>(i), threshold) ? scale : 0.0f;
    out[i] = x[i] * mask[i];
  }
}

void dropout_forward_block(float* out, float* mask, const float* x, int64_t rows, int64_t cols, const int64_t* row_ids,
                           int64_t col0, int64_t width, float p, uint64_t key) {
  const uint64_t threshold = dropout_threshold(p);
  const float scale = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static) if (rows * cols >= kDropoutParallelMin)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c, column = col0 + c;
      const auto whole = static_cast<uint64_t>(row_ids[r] * width + column);
      const float m = column < width && dropout_keeps(key, whole, threshold) ? scale : 0.0f;
      if (mask != nullptr) mask[i] = m;
      out[i] = x[i] * m;
    }
}

void dropout_backward(float* dx, const float* dout, const float* mask, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kDropoutParallelMin)
  for (int64_t i = 0; i < n; ++i) dx[i] = dout[i] * mask[i];
}

void relu_forward(float* x, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kDropoutParallelMin)
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void relu_backward(float* d, const float* out, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kDropoutParallelMin)
  for (int64_t i = 0; i < n; ++i) d[i] = out[i] > 0.0f ? d[i] : 0.0f;
}

}  // namespace loom::kernels
