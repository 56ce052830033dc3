// GELU, tanh approximation: gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
// Evaluated as x * sigmoid(2u), since 0.5 (1 + tanh(u)) == 1 / (1 + exp(-2u)): one exp,
// vectorisable, and no cancellation in 1 + tanh(u) for negative x. Element-wise, so in-place
// (out == inp, dinp == dout) is safe; no __restrict for that reason.
//
// With AVX-512 the loops are written with intrinsics (fast_exp16 from fast_math.hpp, 16 lanes):
// GCC's auto-vectorised fast_exp ran at 256 bits with masked selects and was compute bound
// (~1 ns per element, 3-5% of a gpt-mini step). The tail is a masked vector, never scalar
// code, so every element goes through the same instructions whatever the thread split:
// results are identical for any thread count.
#include "loom/kernels/gelu.hpp"

#include "loom/kernels/fast_math.hpp"

namespace loom::kernels {

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
constexpr int64_t kGeluParallelMin = 1 << 15;

// The portable loops' element: gelu(x), and gelu'(x) * dout. With s = sigmoid(2u):
// d/dx [x s] = s + x * 2 s (1 - s) * du  (1 - tanh^2 = 4 s (1 - s)).
[[maybe_unused]] inline float gelu1(float x) {
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  return x / (1.0f + fast_exp(-2.0f * u));
}
[[maybe_unused]] inline float gelu_grad1(float x, float dout) {
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
  const float s = 1.0f / (1.0f + fast_exp(-2.0f * u));
  return (s + 2.0f * x * s * (1.0f - s) * du) * dout;
}

#if LOOM_FAST_MATH_AVX512
// 16 elements (masked): out = x * sigmoid(2u).
inline __m512 gelu16(__m512 x) {
  const __m512 x2 = _mm512_mul_ps(x, x);
  // -2u = x * (-2 sqrt(2/pi)) * (1 + 0.044715 x^2)
  const __m512 poly = _mm512_fmadd_ps(x2, _mm512_set1_ps(kCubic), _mm512_set1_ps(1.0f));
  const __m512 z = _mm512_mul_ps(_mm512_mul_ps(x, _mm512_set1_ps(-2.0f * kSqrt2OverPi)), poly);
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), fast_exp16(z)));
}

// 16 elements: gelu'(x) * dout.
inline __m512 gelu_grad16(__m512 x, __m512 dout) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 x2 = _mm512_mul_ps(x, x);
  const __m512 poly = _mm512_fmadd_ps(x2, _mm512_set1_ps(kCubic), one);
  const __m512 z = _mm512_mul_ps(_mm512_mul_ps(x, _mm512_set1_ps(-2.0f * kSqrt2OverPi)), poly);
  // du = sqrt(2/pi) (1 + 3 * 0.044715 x^2); s = sigmoid(2u).
  const __m512 du = _mm512_mul_ps(_mm512_fmadd_ps(x2, _mm512_set1_ps(3.0f * kCubic), one),
                                  _mm512_set1_ps(kSqrt2OverPi));
  const __m512 s = _mm512_div_ps(one, _mm512_add_ps(one, fast_exp16(z)));
  // s + 2 x s (1 - s) du
  const __m512 t = _mm512_mul_ps(_mm512_mul_ps(_mm512_add_ps(x, x), s), _mm512_sub_ps(one, s));
  return _mm512_mul_ps(_mm512_fmadd_ps(t, du, s), dout);
}

// Calls body(i, mask) for every 16 elements of n, the last ones masked.
template <class Body>
void for_each_vector16(int64_t n, Body&& body) {
  const int64_t vecs = (n + 15) / 16;
#pragma omp parallel for schedule(static) if (n >= kGeluParallelMin)
  for (int64_t v = 0; v < vecs; ++v) {
    const int64_t i = v * 16;
    body(i, i + 16 <= n ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1));
  }
}

#endif
}  // namespace

namespace {
// An output value in its type: fp32 as it is, bf16 rounded as to_bf16 rounds.
[[maybe_unused]] inline float as_output(float x, float*) { return x; }
[[maybe_unused]] inline bfloat16 as_output(float x, bfloat16*) { return to_bf16(x); }
#if LOOM_FAST_MATH_AVX512
inline void store16(float* p, __m512 x, __mmask16 m) { _mm512_mask_storeu_ps(p, m, x); }
inline void store16(bfloat16* p, __m512 x, __mmask16 m) { store_bf16x16(p, x, m); }
#endif

// out = gelu(inp) in Out's type and kept = bf16(inp), one pass.
template <class Out>
void gelu_forward_keeping(Out* out, bfloat16* kept, const float* inp, int64_t n) {
#if LOOM_FAST_MATH_AVX512
  for_each_vector16(n, [&](int64_t i, __mmask16 m) {
    const __m512 x = _mm512_maskz_loadu_ps(m, inp + i);
    store_bf16x16(kept + i, x, m);
    store16(out + i, gelu16(x), m);
  });
#else
#pragma omp parallel for simd schedule(static) if (n >= kGeluParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    kept[i] = to_bf16(x);
    out[i] = as_output(gelu1(x), out);
  }
#endif
}
}  // namespace

void gelu_forward(float* out, bfloat16* kept, const float* inp, int64_t n) { gelu_forward_keeping(out, kept, inp, n); }

void gelu_forward(bfloat16* out, bfloat16* kept, const float* inp, int64_t n) {
  gelu_forward_keeping(out, kept, inp, n);
}

void gelu_backward(float* dinp, const bfloat16* inp, const float* dout, int64_t n) {
#if LOOM_FAST_MATH_AVX512
  for_each_vector16(n, [&](int64_t i, __mmask16 m) {
    const __m512 r = gelu_grad16(load_bf16x16(inp + i, m), _mm512_maskz_loadu_ps(m, dout + i));
    _mm512_mask_storeu_ps(dinp + i, m, r);
  });
#else
#pragma omp parallel for simd schedule(static) if (n >= kGeluParallelMin)
  for (int64_t i = 0; i < n; ++i) dinp[i] = gelu_grad1(to_f32(inp[i]), dout[i]);
#endif
}

void gelu_forward(float* out, const float* inp, int64_t n) {
#if LOOM_FAST_MATH_AVX512
  for_each_vector16(n, [&](int64_t i, __mmask16 m) {
    _mm512_mask_storeu_ps(out + i, m, gelu16(_mm512_maskz_loadu_ps(m, inp + i)));
  });
#else
#pragma omp parallel for simd schedule(static) if (n >= kGeluParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = gelu1(inp[i]);
#endif
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
#if LOOM_FAST_MATH_AVX512
  for_each_vector16(n, [&](int64_t i, __mmask16 m) {
    const __m512 r = gelu_grad16(_mm512_maskz_loadu_ps(m, inp + i), _mm512_maskz_loadu_ps(m, dout + i));
    _mm512_mask_storeu_ps(dinp + i, m, r);
  });
#else
#pragma omp parallel for simd schedule(static) if (n >= kGeluParallelMin)
  for (int64_t i = 0; i < n; ++i) dinp[i] = gelu_grad1(inp[i], dout[i]);
#endif
}

}  // namespace loom::kernels
