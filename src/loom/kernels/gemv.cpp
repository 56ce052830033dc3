#include "loom/kernels/gemv.hpp"

#include <omp.h>

#if defined(__AVX512F__)
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

#if defined(__AVX512F__)
// The AVX-512 kernels: a block of up to 4 x rows by 4 weight rows in 16 accumulator
// registers, so each weight vector loaded feeds 4 rows' products (the loop above reloads
// it for every row, bound by loads from M = 4 on); the K tail through masked loads of
// zeros. Every (x row, weight row) pair runs the same instructions in the same order
// whatever the block, so a row's result still does not depend on M or N.
struct F32Lanes {  // fp32: 16 products per FMA
  using T = float;
  static constexpr int64_t kStep = 16;
  static __m512 load(const float* p, int64_t n) {
    return _mm512_maskz_loadu_ps(n >= kStep ? __mmask16(0xffff) : __mmask16((1u << n) - 1), p);
  }
  static __m512 dot(__m512 acc, __m512 x, __m512 w) { return _mm512_fmadd_ps(x, w, acc); }
};
#if defined(__AVX512BF16__)
struct Bf16Lanes {  // bf16 (AVX512-BF16): 32 exact products summed in fp32 per vdpbf16ps
  using T = uint16_t;
  static constexpr int64_t kStep = 32;
  static __m512i load(const uint16_t* p, int64_t n) {
    return _mm512_maskz_loadu_epi16(n >= kStep ? ~__mmask32{0} : (__mmask32{1} << n) - 1, p);
  }
  static __m512 dot(__m512 acc, __m512i x, __m512i w) {
    return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(x), reinterpret_cast<__m512bh>(w));
  }
};
#endif

// The sum of a register's 16 lanes, in lane order (once per dot product).
inline float lane_sum(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float s = 0.0f;
  for (float l : lanes) s += l;
  return s;
}

// out[m * RB + r] = x[m] . w[r] for MB x rows and RB weight rows (rows K apart).
template <class L, int MB, int RB>
inline void dot_block(const typename L::T* __restrict x, const typename L::T* __restrict w, int64_t K, float* out) {
  __m512 acc[MB][RB];
  for (auto& row : acc)
    for (auto& a : row) a = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += L::kStep) {
    const int64_t n = K - k;
    // Asking for the weight rows two groups ahead keeps more of them in flight than the
    // hardware prefetcher does (bf16 at M = 1: 8.7 -> 12.6 GB/s on a 77 MB matrix); a hint,
    // it never faults past the end.
    for (int r = 0; r < RB; ++r) _mm_prefetch(reinterpret_cast<const char*>(w + (r + 2 * kRows) * K + k), _MM_HINT_T0);
    decltype(L::load(x, n)) xv[MB];
    for (int m = 0; m < MB; ++m) xv[m] = L::load(x + m * K + k, n);
    for (int r = 0; r < RB; ++r) {
      const auto wv = L::load(w + r * K + k, n);
      for (int m = 0; m < MB; ++m) acc[m][r] = L::dot(acc[m][r], xv[m], wv);
    }
  }
  for (int m = 0; m < MB; ++m)
    for (int r = 0; r < RB; ++r) out[m * RB + r] = lane_sum(acc[m][r]);
}

template <class L, int RB>
inline void dot_rows_blocked(const typename L::T* x, const typename L::T* w, int64_t M, int64_t K, float* out) {
  int64_t m = 0;
  for (; m + 4 <= M; m += 4) dot_block<L, 4, RB>(x + m * K, w, K, out + m * RB);
  switch (M - m) {
    case 3: dot_block<L, 3, RB>(x + m * K, w, K, out + m * RB); break;
    case 2: dot_block<L, 2, RB>(x + m * K, w, K, out + m * RB); break;
    case 1: dot_block<L, 1, RB>(x + m * K, w, K, out + m * RB); break;
    default: break;
  }
}

template <class L>
void gemv_blocked(const typename L::T* x, const typename L::T* W, const float* bias, float* y, int64_t M, int64_t N,
                  int64_t K) {
  const int64_t groups = N / kRows;
  const bool parallel = N * K >= (1 << 16);
#pragma omp parallel if (parallel)
  {
    std::vector<float> out(static_cast<size_t>(M * kRows));
#pragma omp for schedule(static)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t n = g * kRows;
      dot_rows_blocked<L, kRows>(x, W + n * K, M, K, out.data());
      for (int64_t m = 0; m < M; ++m)
        for (int64_t r = 0; r < kRows; ++r)
          y[m * N + n + r] = out[static_cast<size_t>(m * kRows + r)] + (bias != nullptr ? bias[n + r] : 0.0f);
    }
  }
  std::vector<float> out(static_cast<size_t>(M));
  for (int64_t n = groups * kRows; n < N; ++n) {
    dot_rows_blocked<L, 1>(x, W + n * K, M, K, out.data());
    for (int64_t m = 0; m < M; ++m) y[m * N + n] = out[static_cast<size_t>(m)] + (bias != nullptr ? bias[n] : 0.0f);
  }
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
#if defined(__AVX512F__)
  gemv_blocked<F32Lanes>(x, W, bias, y, M, N, K);
#else
  gemv(x, W, bias, y, M, N, K);
#endif
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
  gemv_blocked<Bf16Lanes>(rounded.data(), reinterpret_cast<const uint16_t*>(W), bias, y, M, N, K);
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
