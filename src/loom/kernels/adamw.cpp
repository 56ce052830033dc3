// AdamW as torch.optim.AdamW (decoupled weight decay, bias-corrected moments), one fused
// element-wise pass. Bias corrections are computed in double once per call, as PyTorch does
// in Python floats; per-element math is fp32 like PyTorch's fp32 parameters, and arranged as
// its single-tensor path (lerp for m, sqrt(v) / sqrt(bc2) + eps) to stay within an ulp or two.
#include "loom/kernels/adamw.hpp"

#include "loom/kernels/precision.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <experimental/simd>

namespace loom::kernels {

namespace {

namespace stdx = std::experimental;

struct Scalars {
  float w1, b2, eps, decay, step_size, sqrt_bc2;
};

// One element of the update, for full vectors (F = stdx::simd<float>) and the scalar
// tail (F = float) alike, so both are the same arithmetic.
template <class F>
void adamw_step(F& p, F& m, F& v, const F g, const Scalars& s) {
  using std::sqrt;
  m = m + s.w1 * (g - m);  // == b1 m + (1 - b1) g, as PyTorch's lerp
  v = s.b2 * v + (1.0f - s.b2) * g * g;
  const F denom = sqrt(v) / s.sqrt_bc2 + s.eps;
  // p -= lr wd p, then p -= lr mhat / (sqrt(vhat) + eps) with step_size = lr / bc1.
  p = p * s.decay - s.step_size * (m / denom);
}

// std::experimental::simd rather than `omp simd`: without -fno-math-errno GCC will not
// vectorise std::sqrt in a loop (it keeps a libm call for errno), which made this
// memory-bound update 2.4x slower. stdx::sqrt maps to the vector sqrt instruction.
void adamw_run(float* param, const float* grad, float* m, float* v, int64_t n, const Scalars& s) {
  // 8 lanes, not native_simd's 16 under AVX-512: the 512-bit sqrt path trips a GCC 12
  // -Wmaybe-uninitialized false positive inside its headers, and the loop is memory-bound.
  using F = stdx::simd<float, stdx::simd_abi::deduce_t<float, 8>>;
  constexpr int64_t W = static_cast<int64_t>(F::size());
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    F p(param + i, stdx::element_aligned), mi(m + i, stdx::element_aligned);
    F vi(v + i, stdx::element_aligned);
    adamw_step(p, mi, vi, F(grad + i, stdx::element_aligned), s);
    p.copy_to(param + i, stdx::element_aligned);
    mi.copy_to(m + i, stdx::element_aligned);
    vi.copy_to(v + i, stdx::element_aligned);
  }
  for (; i < n; ++i) adamw_step(param[i], m[i], v[i], grad[i], s);
}

// A thread's share; with a bf16 copy, in runs of 4096 values (48 KiB of param, grad and
// moments) so that each run's updated values are converted while still in the L1/L2 cache.
void adamw_chunk(float* param, const float* grad, float* m, float* v, int64_t n, const Scalars& s,
                 bfloat16* param_bf16) {
  if (param_bf16 == nullptr) return adamw_run(param, grad, m, v, n, s);
  constexpr int64_t kRun = 4096;
  for (int64_t i = 0; i < n; i += kRun) {
    const int64_t len = std::min(kRun, n - i);
    adamw_run(param + i, grad + i, m + i, v + i, len, s);
    convert_run_to_bf16(param + i, param_bf16 + i, len);
  }
}

}  // namespace

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWParams& p,
                  bfloat16* param_bf16) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step));
  const Scalars s{1.0f - p.beta1,
                  p.beta2,
                  p.eps,
                  static_cast<float>(1.0 - static_cast<double>(p.lr) * p.weight_decay),
                  static_cast<float>(p.lr / bc1),
                  static_cast<float>(std::sqrt(bc2))};
  const int nt = n >= (1 << 15) ? omp_get_max_threads() : 1;
#pragma omp parallel num_threads(nt)
  {
    const int tid = omp_get_thread_num(), nth = omp_get_num_threads();
    const int64_t i0 = n * tid / nth, i1 = n * (tid + 1) / nth;
    adamw_chunk(param + i0, grad + i0, m + i0, v + i0, i1 - i0, s, param_bf16 != nullptr ? param_bf16 + i0 : nullptr);
  }
}

}  // namespace loom::kernels
