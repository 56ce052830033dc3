#include "loom/kernels/gemv.hpp"

#include <omp.h>

namespace loom::kernels {

namespace {
// Dot product with four independent accumulator lanes so the FMA latency is hidden; the
// order is fixed, so the sum is the same on every call.
inline float dot(const float* __restrict a, const float* __restrict b, int64_t K) {
  constexpr int64_t kLanes = 64;
  float acc[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
#pragma omp simd
    for (int64_t j = 0; j < kLanes; ++j) acc[j] += a[k + j] * b[k + j];
  }
  float tail = 0.0f;
  for (; k < K; ++k) tail += a[k] * b[k];
  float s = 0.0f;
  for (int64_t j = 0; j < kLanes; ++j) s += acc[j];
  return s + tail;
}
}  // namespace

void gemv_rows(const float* x, const float* W, const float* bias, float* y, int64_t M, int64_t N, int64_t K) {
  // Enough output features per thread that the fork is paid for by the bytes streamed.
  const bool parallel = N * K >= (1 << 16);
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t n = 0; n < N; ++n) {
    const float* w = W + n * K;  // (K)
    const float b = bias != nullptr ? bias[n] : 0.0f;
    for (int64_t m = 0; m < M; ++m) y[m * N + n] = dot(x + m * K, w, K) + b;
  }
}

}  // namespace loom::kernels
