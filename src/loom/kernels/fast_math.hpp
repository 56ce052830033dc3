// Vectorisable expf for the kernels' inner loops: without -ffast-math GCC will not vectorise
// std::exp, and softmax / GELU would then be bound on a scalar libm call per element.
// Cephes-style: exp(x) = 2^n * p(r), r = x - n ln2 in [-ln2/2, ln2/2], p a degree-7 polynomial.
// Invariant: relative error <= 2e-7 for x in [-87.3, 88.7]; exp(x < -87.33) == 0 (incl. -inf),
// exp(x > 88.72) == +inf, NaN in gives NaN out (NaN detection downstream must keep working).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "loom/tensor/dtype.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
#define LOOM_FAST_MATH_AVX512 1
#else
#define LOOM_FAST_MATH_AVX512 0
#endif

namespace loom::kernels {

// Branch-free so that `#pragma omp simd` loops calling it vectorise (checked with -fopt-info-vec).
inline float fast_exp(float x) {
  constexpr float kLo = -87.33654f;  // exp(kLo) ~ FLT_MIN: below, the true value is subnormal
  constexpr float kHi = 88.72283f;   // exp(kHi) ~ FLT_MAX
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // ln2 split so that n * kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;
  // Adding 1.5 * 2^23 rounds to the nearest integer and leaves it in the low mantissa bits,
  // which avoids a float->int conversion (undefined for NaN in C++).
  constexpr float kRound = 12582912.0f;

  // The comparisons are false for NaN, so NaN flows through to the result.
  float xc = x < kLo ? kLo : x;
  xc = xc > kHi ? kHi : xc;
  const float t = std::fma(xc, kLog2e, kRound);
  const float n = t - kRound;  // in [-126, 128]
  float r = std::fma(n, -kLn2Hi, xc);
  r = std::fma(n, -kLn2Lo, r);
  // Taylor coefficients 1/k!; degree 7 keeps the truncation error < 1e-9 on |r| <= ln2/2,
  // so the result is limited by float rounding (~1.5 ulp).
  float p = 1.98412698e-4f;
  p = std::fma(p, r, 1.38888889e-3f);
  p = std::fma(p, r, 8.33333333e-3f);
  p = std::fma(p, r, 4.16666667e-2f);
  p = std::fma(p, r, 1.66666667e-1f);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  // 2^n built from the exponent bits; n == 128 would overflow the field, so it is taken as
  // 2^127 * 2.
  const int32_t ni = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kRound);
  const int32_t big = ni > 127 ? 1 : 0;
  const float scale = std::bit_cast<float>((ni - big + 127) << 23);
  float y = p * scale * (big ? 2.0f : 1.0f);
  y = x < kLo ? 0.0f : y;
  y = x > kHi ? INFINITY : y;
  return y;
}

#if LOOM_FAST_MATH_AVX512
// fast_exp on 16 AVX-512 lanes, for kernels written with intrinsics: the same steps, so the
// same value as fast_exp bit for bit, for every input (NaN, +-inf and the clamped ranges
// included; tests/kernels/test_fast_math.cpp checks it). 2^n is applied by vscalefps.
inline __m512 fast_exp16(__m512 x) {
  // The maskz forms with a full mask: GCC 12 warns (-Wmaybe-uninitialized) on the unmasked
  // ones, whose pass-through operand is _mm512_undefined_ps().
  constexpr __mmask16 kAll = 0xFFFF;
  const __m512 lo = _mm512_set1_ps(-87.33654f), hi = _mm512_set1_ps(88.72283f);
  const __m512 round = _mm512_set1_ps(12582912.0f);
  // max/min return their second operand when either is NaN, so NaN flows through.
  const __m512 xc = _mm512_maskz_min_ps(kAll, hi, _mm512_maskz_max_ps(kAll, lo, x));
  const __m512 t = _mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), round);
  const __m512 n = _mm512_sub_ps(t, round);  // in [-126, 128]
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.98412698e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.38888889e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.33333333e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.16666667e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.66666667e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  __m512 y = _mm512_maskz_scalef_ps(kAll, p, n);  // p * 2^n, rounded once like p * scale
  y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), _mm512_setzero_ps());
  y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), _mm512_set1_ps(INFINITY));
  return y;
}

// The maskz forms with a full mask below: GCC 12 warns (-Wmaybe-uninitialized) on the unmasked
// ones, whose pass-through operand is undefined.
constexpr __mmask16 kAll16 = 0xFFFF;

// 16 bf16 values widened to fp32 (exact); lanes outside m read as 0. (Plain AVX-512F: a
// masked 16-bit load would need AVX-512BW.)
inline __m512 load_bf16x16(const bfloat16* p, __mmask16 m) {
  alignas(32) bfloat16 tail[16] = {};
  if (m != 0xFFFF)
    for (int j = 0; j < 16 && ((m >> j) & 1); ++j) tail[j] = p[j];
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(m == 0xFFFF ? p : tail));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll16, _mm512_maskz_cvtepu16_epi32(kAll16, raw), 16));
}

// 16 fp32 values rounded to bf16 as to_bf16 does (nearest even; NaN stays a quiet NaN), the
// lanes of m stored. On AVX512-BF16 cores this is one vcvtneps2bf16, whose only difference
// from to_bf16 is that fp32 subnormal inputs (below 2^-126) become +-0, as in oneDNN's own
// conversions there; it made the attention's exp-score pass ~1.3x faster than the integer
// rounding below (AVX-512F only), which every AVX-512 core can run.
inline void store_bf16x16(bfloat16* p, __m512 x, __mmask16 m) {
#if defined(__AVX512BF16__)
  const __m256i b = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x));
#else
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_maskz_srli_epi32(kAll16, u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
  r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), _mm512_or_si512(u, _mm512_set1_epi32(0x400000)));
  const __m256i b = _mm512_maskz_cvtepi32_epi16(kAll16, _mm512_maskz_srli_epi32(kAll16, r, 16));
#endif
  if (m == 0xFFFF) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), b);
    return;
  }
#if defined(__AVX512BW__) && defined(__AVX512VL__)
  _mm256_mask_storeu_epi16(p, m, b);
#else
  alignas(32) bfloat16 tail[16];
  _mm256_store_si256(reinterpret_cast<__m256i*>(tail), b);
  for (int j = 0; j < 16 && ((m >> j) & 1); ++j) p[j] = tail[j];
#endif
}
#endif

}  // namespace loom::kernels
