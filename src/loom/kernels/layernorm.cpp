// LayerNorm over the last dimension, fused forward and backward (as llm.c's layernorm).
// Rows are independent and split statically over threads. dweight/dbias are row sums:
// each thread sums its own contiguous rows into a private (2, C) partial, and the partials
// are added in thread order afterwards, so results are bit-identical for a fixed thread count.
#include "loom/kernels/layernorm.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace loom::kernels {

namespace {
// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kLayerNormParallelMin = 1 << 14;

// An input element in fp32: itself, or a bf16 one widened (exact).
inline float as_f32(float v) { return v; }
inline float as_f32(bfloat16 v) { return to_f32(v); }

// layernorm_backward over an fp32 input or its bf16 copy (the same arithmetic on its values).
template <class In>
void backward(float* dinp, float* dweight, float* dbias, const float* dout, const In* inp, const float* weight,
              const float* mean, const float* rstd, int64_t N, int64_t C);
}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C, bfloat16* kept) {
#pragma omp parallel for schedule(static) if (N * C >= kLayerNormParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const float* __restrict x = inp + n * C;  // (C)
    float* __restrict o = out + n * C;        // (C)
    // The mean is summed shifted by the row's first value: the terms stay near zero, so the
    // fp32 sum keeps its bits even when the row's mean is large (at mean 100 an unshifted
    // sum of C terms loses ~C/2 ulps of 100, and the summation order, which differs between
    // AVX2 and AVX-512 lanes, decides which).
    const float shift = x[0];
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < C; ++c) sum += x[c] - shift;
    const float m = shift + sum / static_cast<float>(C);
    // Two passes (variance of x - m) rather than E[x^2] - m^2, which cancels for large means.
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int64_t c = 0; c < C; ++c) sq += (x[c] - m) * (x[c] - m);
    const float s = 1.0f / std::sqrt(sq / static_cast<float>(C) + kLayerNormEps);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c] + bias[c];
    if (kept != nullptr) {
      bfloat16* __restrict k = kept + n * C;  // (C)
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) k[c] = to_bf16(x[c]);
    }
    mean[n] = m;
    rstd[n] = s;
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) {
  backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const bfloat16* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) {
  backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

namespace {

template <class In>
void backward(float* dinp, float* dweight, float* dbias, const float* dout, const In* inp, const float* weight,
              const float* mean, const float* rstd, int64_t N, int64_t C) {
  const int nt = N * C >= kLayerNormParallelMin ? omp_get_max_threads() : 1;
  std::vector<float> partial(static_cast<size_t>(nt) * 2 * C, 0.0f);  // (nt, 2, C): dweight, dbias
#pragma omp parallel num_threads(nt)
  {
    // The row split is computed by hand (not left to `omp for`) so that it is fixed by nt.
    const int tid = omp_get_thread_num(), nth = omp_get_num_threads();
    const int64_t r0 = N * tid / nth, r1 = N * (tid + 1) / nth;
    float* __restrict pw = partial.data() + static_cast<int64_t>(tid) * 2 * C;  // (C)
    float* __restrict pb = pw + C;                                              // (C)
    for (int64_t n = r0; n < r1; ++n) {
      const In* __restrict x = inp + n * C;  // (C)
      // Not __restrict: dx and d are only ever used at the same index, so a caller passing
      // dinp == dout still gets the right answer.
      const float* d = dout + n * C;  // (C)
      float* dx = dinp + n * C;       // (C)
      const float m = mean[n], s = rstd[n];
      // dinp = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dout * weight.
      float sum_d = 0.0f, sum_dn = 0.0f;
#pragma omp simd reduction(+ : sum_d, sum_dn)
      for (int64_t c = 0; c < C; ++c) {
        const float norm = (as_f32(x[c]) - m) * s;
        const float dnorm = d[c] * weight[c];
        sum_d += dnorm;
        sum_dn += dnorm * norm;
      }
      const float mean_d = sum_d / static_cast<float>(C), mean_dn = sum_dn / static_cast<float>(C);
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        const float norm = (as_f32(x[c]) - m) * s;
        pw[c] += d[c] * norm;
        pb[c] += d[c];
        dx[c] = s * (d[c] * weight[c] - mean_d - norm * mean_dn);
      }
    }
  }
  for (int t = 0; t < nt; ++t) {
    const float* pw = partial.data() + static_cast<int64_t>(t) * 2 * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      dweight[c] += pw[c];
      dbias[c] += pw[C + c];
    }
  }
}

}  // namespace

}  // namespace loom::kernels
