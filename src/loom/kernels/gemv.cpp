#include "loom/kernels/gemv.hpp"

#include <omp.h>

#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif

#include <cstring>
#include <vector>

namespace loom::kernels {

namespace {

constexpr int64_t kLanes = 16;  // one AVX-512 register of floats per accumulator
constexpr int64_t kRows = 4;    // weight rows streamed together

// A weight element as fp32: itself, or a bf16's bits shifted into the upper half (exact).
inline float widen(float w) { return w; }
inline float widen(uint16_t w) {
  const uint32_t u = static_cast<uint32_t>(w) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// y[r] = x . W[r] for kRows consecutive weight rows: four memory streams in flight measured
// ~20% more single-core DRAM bandwidth than one row at a time. The order of every sum is
// fixed by K alone, so a row's result does not depend on M, on the thread count or on
// which other rows share the batch.
template <class Weight>
inline void dot_rows(const float* __restrict x, const Weight* __restrict w, int64_t K, float* out) {
  float acc[kRows][kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
#pragma omp simd
    for (int64_t j = 0; j < kLanes; ++j) {
      const float xv = x[k + j];
      for (int64_t r = 0; r < kRows; ++r) acc[r][j] += xv * widen(w[r * K + k + j]);
    }
  }
  for (int64_t r = 0; r < kRows; ++r) {
    float tail = 0.0f;
    for (int64_t t = k; t < K; ++t) tail += x[t] * widen(w[r * K + t]);
    float s = 0.0f;
    for (int64_t j = 0; j < kLanes; ++j) s += acc[r][j];
    out[r] = s + tail;
  }
}

// One row (the last N % kRows), summed in the same order as a row of dot_rows.
template <class Weight>
inline float dot_row(const float* __restrict x, const Weight* __restrict w, int64_t K) {
  float acc[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
#pragma omp simd
    for (int64_t j = 0; j < kLanes; ++j) acc[j] += x[k + j] * widen(w[k + j]);
  }
  float tail = 0.0f;
  for (int64_t t = k; t < K; ++t) tail += x[t] * widen(w[t]);
  float s = 0.0f;
  for (int64_t j = 0; j < kLanes; ++j) s += acc[j];
  return s + tail;
}

#if defined(__AVX512BF16__)
// bf16 x bf16 rows with AVX512-BF16's dot product (vdpbf16ps: 32 exact products an
// instruction, summed in fp32), the K tail through masked loads of zeros: 1.3-1.5x the
// shift-and-FMA loop above in L2, where that loop is bound by its instructions. Compiled
// where the build's target has the instructions (-march=native on such a CPU); the
// portable loop elsewhere. x holds bf16 values (uint16_t) in this path only.
inline void dot_rows(const uint16_t* __restrict x, const uint16_t* __restrict w, int64_t K, float* out) {
  __m512 acc[kRows];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 32) {
    const __mmask32 mask = K - k >= 32 ? ~__mmask32{0} : (__mmask32{1} << (K - k)) - 1;
    const auto xv = reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, x + k));
    // Half the bytes per product leave the hardware prefetcher behind: asking for the rows
    // two groups ahead measured 8.7 -> 12.6 GB/s on a 77 MB matrix (a hint: never faults).
    for (int64_t r = 0; r < kRows; ++r)
      _mm_prefetch(reinterpret_cast<const char*>(w + (r + 2 * kRows) * K + k), _MM_HINT_T0);
    for (int64_t r = 0; r < kRows; ++r)
      acc[r] = _mm512_dpbf16_ps(acc[r], xv, reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, w + r * K + k)));
  }
  for (int64_t r = 0; r < kRows; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
}

inline float dot_row(const uint16_t* __restrict x, const uint16_t* __restrict w, int64_t K) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 32) {
    const __mmask32 mask = K - k >= 32 ? ~__mmask32{0} : (__mmask32{1} << (K - k)) - 1;
    acc = _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, x + k)),
                           reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, w + k)));
  }
  return _mm512_reduce_add_ps(acc);
}
#endif

template <class Input, class Weight>
void gemv(const Input* x, const Weight* W, const float* bias, float* y, int64_t M, int64_t N, int64_t K) {
  const int64_t groups = N / kRows;
  // Enough output features per thread that the fork is paid for by the bytes streamed.
  const bool parallel = N * K >= (1 << 16);
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t n = g * kRows;
    float out[kRows];
    for (int64_t m = 0; m < M; ++m) {  // the kRows weight rows stay in L1 across the M rows
      dot_rows(x + m * K, W + n * K, K, out);
      for (int64_t r = 0; r < kRows; ++r) y[m * N + n + r] = out[r] + (bias != nullptr ? bias[n + r] : 0.0f);
    }
  }
  for (int64_t n = groups * kRows; n < N; ++n)
    for (int64_t m = 0; m < M; ++m) y[m * N + n] = dot_row(x + m * K, W + n * K, K) + (bias != nullptr ? bias[n] : 0.0f);
}

}  // namespace

void gemv_rows(const float* x, const float* W, const float* bias, float* y, int64_t M, int64_t N, int64_t K) {
  gemv(x, W, bias, y, M, N, K);
}

// x rounded to bf16 as oneDNN's bf16 matmul reads it; a bf16 x bf16 product is exact in
// fp32, so only the order of the fp32 sums differs from oneDNN's.
void gemv_rows_portable(const float* x, const bfloat16* W, const float* bias, float* y, int64_t M, int64_t N, int64_t K) {
  thread_local std::vector<float> rounded;
  rounded.resize(static_cast<size_t>(M * K));
  for (int64_t i = 0; i < M * K; ++i) rounded[static_cast<size_t>(i)] = to_f32(to_bf16(x[i]));
  gemv(rounded.data(), reinterpret_cast<const uint16_t*>(W), bias, y, M, N, K);
}

void gemv_rows(const float* x, const bfloat16* W, const float* bias, float* y, int64_t M, int64_t N, int64_t K) {
#if defined(__AVX512BF16__)
  thread_local std::vector<uint16_t> rounded;
  rounded.resize(static_cast<size_t>(M * K));
  for (int64_t i = 0; i < M * K; ++i) rounded[static_cast<size_t>(i)] = to_bf16(x[i]).bits;
  gemv(rounded.data(), reinterpret_cast<const uint16_t*>(W), bias, y, M, N, K);
#else
  gemv_rows_portable(x, W, bias, y, M, N, K);
#endif
}

void gemv_rows(const float* x, Operand W, const float* bias, float* y, int64_t M, int64_t N, int64_t K) {
  if (W.dtype == DType::BF16)
    gemv_rows(x, static_cast<const bfloat16*>(W.data), bias, y, M, N, K);
  else
    gemv_rows(x, static_cast<const float*>(W.data), bias, y, M, N, K);
}

}  // namespace loom::kernels
