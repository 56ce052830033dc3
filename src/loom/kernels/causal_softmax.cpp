#include "loom/kernels/causal_softmax.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "loom/kernels/fast_math.hpp"

namespace loom::kernels {

namespace {

// Row i is processed up to the next multiple of 16 columns, with j > i masked by selects (or,
// with AVX-512, by lane masks) rather than ending the loop at i: the vector loops then have no
// scalar remainder, which for rows of a few hundred elements halved the softmax time. Masked
// columns may hold anything (never written, or stale), so they are only ever read under a mask.
[[maybe_unused]] int64_t padded_row(int64_t i, int64_t cols) { return std::min(cols, (i + 16) & ~int64_t{15}); }

// Parallel over (head, row) pairs when the rows hold enough values to pay for the threads.
bool worth_threads(int64_t H, int64_t R, const ScoreRows& rows) { return H * R * rows.cols >= (1 << 15); }

#if LOOM_FAST_MATH_AVX512
// The passes are written with AVX-512 intrinsics when available: GCC vectorised the portable
// loops at 256 bits with fast_exp's selects, and the forward softmax was 15% of the attention
// forward; the intrinsics version makes the attention forward ~15% faster.
// Horizontal sum / max in a fixed order (GCC 12's _mm512_reduce_* warn -Wmaybe-uninitialized).
inline float hsum16(__m512 v) {
  alignas(64) float a[16];
  _mm512_store_ps(a, v);
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) a[j] += a[j + w];
  return a[0];
}
inline float hmax16(__m512 v) {
  alignas(64) float a[16];
  _mm512_store_ps(a, v);
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) a[j] = a[j + w] > a[j] ? a[j + w] : a[j];
  return a[0];
}

// Lanes j0 .. j0 + 15 that are <= i (causal mask of one 16-column chunk).
inline __mmask16 causal_mask(int64_t i, int64_t j0) {
  const int64_t valid = i - j0 + 1;  // >= 1 for the chunks visited
  return valid >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << valid) - 1);
}
// The largest of row[0..i], over the 16-column chunks up to the diagonal's.
inline float causal_row_max(const float* row, int64_t i) {
  __m512 vm = _mm512_set1_ps(-INFINITY);
  for (int64_t c = 0; c < i / 16 + 1; ++c) {
    const __mmask16 k = causal_mask(i, c * 16);
    vm = _mm512_mask_max_ps(vm, k, vm, _mm512_maskz_loadu_ps(k, row + c * 16));
  }
  return hmax16(vm);
}
// The softmax backward of one 16-column chunk: P (dP - dot) on the lanes of k, 0 elsewhere.
inline __m512 chunk_ds(const float* p, const float* dp, __m512 dot, __mmask16 k) {
  const __m512 diff = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, dp), dot);
  return _mm512_maskz_mov_ps(k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, p), diff));
}
// Lanes j0 .. j0 + 15 inside a row of `cols` columns.
inline __mmask16 row_mask(int64_t j0, int64_t cols) {
  return j0 + 16 <= cols ? __mmask16(0xFFFF) : __mmask16((1u << (cols - j0)) - 1);
}
#endif

// Columns [from, cols) of a row set to 0.
template <class Value>
void zero_tail(Value* row, int64_t from, int64_t cols) {
  std::memset(row + from, 0, sizeof(Value) * (cols - from));
}

}  // namespace

void causal_softmax(float* scores, const ScoreRows& rows, int64_t H, int64_t i0, int64_t i1) {
  const int64_t R = i1 - i0, cols = rows.cols;
#pragma omp parallel for schedule(static) if (worth_threads(H, R, rows))
  for (int64_t r = 0; r < H * R; ++r) {
    const int64_t i = i0 + r % R, at = rows.at(r / R, i);
    float* __restrict row = scores + at;
#if LOOM_FAST_MATH_AVX512
    // 16-column chunks up to the one holding the diagonal; lanes j > i are masked (never
    // read, written as 0), so there is no scalar remainder and cols need not be a multiple of 16.
    const int64_t chunks = i / 16 + 1;
    const __m512 m = _mm512_set1_ps(causal_row_max(row, i));
    __m512 vs = _mm512_setzero_ps();
    for (int64_t c = 0; c < chunks; ++c) {
      const __mmask16 k = causal_mask(i, c * 16);
      const __m512 e = _mm512_maskz_mov_ps(k, fast_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, row + c * 16), m)));
      vs = _mm512_add_ps(vs, e);
      _mm512_mask_storeu_ps(row + c * 16, k | row_mask(c * 16, cols), e);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / hsum16(vs));
    for (int64_t c = 0; c < chunks; ++c) {
      const __mmask16 k = causal_mask(i, c * 16);
      const __m512 p = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, row + c * 16), inv);
      _mm512_mask_storeu_ps(row + c * 16, k, p);
    }
    zero_tail(row, std::min(cols, chunks * 16), cols);
#else
    const int64_t n = padded_row(i, cols);
    float m = -INFINITY;
    // A select, not std::max: GCC vectorises std::max's NaN-ordering poorly here.
#pragma omp simd reduction(max : m) simdlen(16)
    for (int64_t j = 0; j < n; ++j) {
      // The load is unconditional (a conditional one kept the AVX2 loop scalar); masked
      // columns may hold anything, and the select drops them.
      const float s = row[j];
      const float x = j <= i ? s : -INFINITY;
      m = x > m ? x : m;
    }
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; ++j) {
      const float e = j <= i ? fast_exp(row[j] - m) : 0.0f;
      row[j] = e;
      sum += e;
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) row[j] *= inv;
    zero_tail(row, n, cols);
#endif
  }
}

void causal_softmax_backward_row(float* __restrict dr, const float* __restrict pr, int64_t i, int64_t cols) {
  // pr is exactly 0 for j > i.
#if LOOM_FAST_MATH_AVX512
  const int64_t chunks = i / 16 + 1;
  __m512 vdot = _mm512_setzero_ps();
  for (int64_t c = 0; c < chunks; ++c) {
    const __mmask16 k = causal_mask(i, c * 16);
    vdot = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, pr + c * 16), _mm512_maskz_loadu_ps(k, dr + c * 16), vdot);
  }
  const __m512 dot = _mm512_set1_ps(hsum16(vdot));
  for (int64_t c = 0; c < chunks; ++c) {
    const __mmask16 k = causal_mask(i, c * 16);
    const __m512 v = chunk_ds(pr + c * 16, dr + c * 16, dot, k);
    _mm512_mask_storeu_ps(dr + c * 16, row_mask(c * 16, cols), v);
  }
  zero_tail(dr, std::min(cols, chunks * 16), cols);
#else
  const int64_t n = padded_row(i, cols);
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int64_t j = 0; j < n; ++j) dot += j <= i ? pr[j] * dr[j] : 0.0f;
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) dr[j] = j <= i ? pr[j] * (dr[j] - dot) : 0.0f;
  zero_tail(dr, n, cols);
#endif
}

void causal_softmax_backward(float* d, const float* p, const ScoreRows& rows, int64_t H, int64_t i0, int64_t i1) {
  const int64_t R = i1 - i0;
#pragma omp parallel for schedule(static) if (worth_threads(H, R, rows))
  for (int64_t r = 0; r < H * R; ++r) {
    const int64_t i = i0 + r % R, at = rows.at(r / R, i);
    causal_softmax_backward_row(d + at, p + at, i, rows.cols);
  }
}

void causal_exp(const float* scores, const ScoreRows& rows, int64_t H, int64_t i0, int64_t i1, bfloat16* e,
                float* inv_sum, float* lse) {
  const int64_t R = i1 - i0, cols = rows.cols;
#pragma omp parallel for schedule(static) if (worth_threads(H, R, rows))
  for (int64_t r = 0; r < H * R; ++r) {
    const int64_t i = i0 + r % R, at = rows.at(r / R, i);
    const float* __restrict row = scores + at;
    bfloat16* __restrict e_row = e + at;
    float m = -INFINITY, sum = 0.0f;
    int64_t written = 0;  // columns of e_row written by the pass; the rest of [0, cols) is zeroed
#if LOOM_FAST_MATH_AVX512
    const int64_t chunks = i / 16 + 1;
    m = causal_row_max(row, i);
    const __m512 vmax = _mm512_set1_ps(m);
    __m512 vs = _mm512_setzero_ps();
    for (int64_t c = 0; c < chunks; ++c) {
      const __mmask16 k = causal_mask(i, c * 16);
      const __m512 x = _mm512_maskz_mov_ps(k, fast_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, row + c * 16), vmax)));
      vs = _mm512_add_ps(vs, x);
      store_bf16x16(e_row + c * 16, x, row_mask(c * 16, cols));
    }
    sum = hsum16(vs);
    written = std::min(cols, chunks * 16);
#else
    const int64_t n = padded_row(i, cols);
#pragma omp simd reduction(max : m) simdlen(16)
    for (int64_t j = 0; j < n; ++j) {
      const float x = j <= i ? row[j] : -INFINITY;
      m = x > m ? x : m;
    }
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; ++j) {
      const float x = j <= i ? fast_exp(row[j] - m) : 0.0f;
      e_row[j] = to_bf16(x);
      sum += x;
    }
    written = n;
#endif
    zero_tail(e_row, written, cols);
    inv_sum[r] = 1.0f / sum;
    lse[r] = m + std::log(sum);
  }
}

void causal_softmax_backward_from_lse_row(float* __restrict pr, const float* __restrict dr, int64_t i, int64_t cols,
                                          float row_lse, bfloat16* __restrict p_row, bfloat16* __restrict ds_row) {
  int64_t written = 0;
#if LOOM_FAST_MATH_AVX512
  const int64_t chunks = i / 16 + 1;
  const __m512 vlse = _mm512_set1_ps(row_lse);
  __m512 vdot = _mm512_setzero_ps();
  for (int64_t c = 0; c < chunks; ++c) {
    const __mmask16 k = causal_mask(i, c * 16);
    const __m512 p = _mm512_maskz_mov_ps(k, fast_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, pr + c * 16), vlse)));
    _mm512_mask_storeu_ps(pr + c * 16, k, p);
    store_bf16x16(p_row + c * 16, p, row_mask(c * 16, cols));
    vdot = _mm512_fmadd_ps(p, _mm512_maskz_loadu_ps(k, dr + c * 16), vdot);
  }
  const __m512 dot = _mm512_set1_ps(hsum16(vdot));
  for (int64_t c = 0; c < chunks; ++c) {
    const __mmask16 k = causal_mask(i, c * 16);
    const __m512 ds = chunk_ds(pr + c * 16, dr + c * 16, dot, k);
    store_bf16x16(ds_row + c * 16, ds, row_mask(c * 16, cols));
  }
  written = std::min(cols, chunks * 16);
#else
  const int64_t n = padded_row(i, cols);
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int64_t j = 0; j < n; ++j) {
    const float p = j <= i ? fast_exp(pr[j] - row_lse) : 0.0f;
    pr[j] = p;
    p_row[j] = to_bf16(p);
    dot += p * (j <= i ? dr[j] : 0.0f);
  }
  for (int64_t j = 0; j < n; ++j) ds_row[j] = to_bf16(j <= i ? pr[j] * (dr[j] - dot) : 0.0f);
  written = n;
#endif
  zero_tail(p_row, written, cols);
  zero_tail(ds_row, written, cols);
}

void causal_softmax_backward_from_lse(float* s, const float* dp, const ScoreRows& rows, int64_t H, int64_t i0,
                                      int64_t i1, const float* lse, bfloat16* p_bf16, bfloat16* ds_bf16) {
  const int64_t R = i1 - i0;
#pragma omp parallel for schedule(static) if (worth_threads(H, R, rows))
  for (int64_t r = 0; r < H * R; ++r) {
    const int64_t i = i0 + r % R, at = rows.at(r / R, i);
    causal_softmax_backward_from_lse_row(s + at, dp + at, i, rows.cols, lse[r], p_bf16 + at, ds_bf16 + at);
  }
}

}  // namespace loom::kernels
