// Softmax cross-entropy over rows of (padded) logits, with the backward fused in place.
// Numerically stable: every row subtracts its max before exp, so logits of any magnitude give
// finite losses. Only the first V of Vp columns are read; the backward zeroes the padding so
// the (N, Vp) dlogits can feed the LM-head matmul directly. Rows are independent.
#include "loom/kernels/cross_entropy.hpp"

#include <cmath>

#include "loom/error.hpp"
#include "loom/kernels/fast_math.hpp"

namespace loom::kernels {

namespace {

constexpr int64_t kCrossEntropyParallelMin = 1 << 15;

// Checked before the parallel loops: an exception must not leave an OpenMP region.
void check_targets(const int32_t* targets, int64_t N, int64_t V) {
  for (int64_t n = 0; n < N; ++n) {
    check(targets[n] >= 0 && targets[n] < V, "cross_entropy: target ", targets[n], " at row ", n,
          " is out of range [0, ", V, ")");
  }
}

float row_max(const float* x, int64_t V) {
  float m = -INFINITY;
  // A select, not std::max: GCC vectorises std::max's NaN-ordering poorly (3x slower).
#pragma omp simd reduction(max : m) simdlen(16)
  for (int64_t j = 0; j < V; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

}  // namespace

void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t N,
                           int64_t V, int64_t Vp) {
  check_targets(targets, N, V);
#pragma omp parallel for schedule(static) if (N * V >= kCrossEntropyParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const float* __restrict x = logits + n * Vp;  // (V) real columns of the row
    const float m = row_max(x, V);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < V; ++j) sum += fast_exp(x[j] - m);
    // logsumexp - logit[target], both taken relative to the row max.
    losses[n] = std::log(sum) - (x[targets[n]] - m);
  }
}

void cross_entropy_backward(float* logits, const int32_t* targets, float dloss, int64_t N, int64_t V,
                            int64_t Vp) {
  check_targets(targets, N, V);
#pragma omp parallel for schedule(static) if (N * V >= kCrossEntropyParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    float* __restrict x = logits + n * Vp;  // (Vp) becomes dlogits
    const float m = row_max(x, V);
    // exp is stored in place, so the second pass is a scale and not a second exp.
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < V; ++j) {
      x[j] = fast_exp(x[j] - m);
      sum += x[j];
    }
    const float s = dloss / sum;
#pragma omp simd
    for (int64_t j = 0; j < V; ++j) x[j] *= s;
    for (int64_t j = V; j < Vp; ++j) x[j] = 0.0f;
    x[targets[n]] -= dloss;
  }
}

}  // namespace loom::kernels
