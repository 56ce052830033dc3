// Causal multi-head self-attention with Q, K, V read in place from the (B, T, 3C) QKV buffer:
// every product is one oneDNN batched matmul over (B, NH) with strided views, so no head is
// copied. Causality is exploited by splitting query rows into blocks: the block of rows
// [i0, i1) only multiplies against keys [0, i1), which skips most of the upper triangle.
// Invariant: att holds the softmax probabilities with exact zeros above the diagonal, and the
// GEMMs only ever read att/datt columns that the softmax passes wrote.
#include "loom/kernels/attention.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "loom/kernels/fast_math.hpp"
#include "loom/kernels/matmul.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom::kernels {

namespace {

// Rows per causal block. Short sequences use one block (the plain full product); longer ones
// use up to 8 blocks of >= 64 rows, which does ~(nb + 1) / (2 nb) of the full work while each
// GEMM stays big enough for oneDNN to run well. At T = 256, 4 blocks of 64 rows measured 7%
// (forward) and 20% (backward) faster than 8 blocks of 32: oneDNN's batched fp32 GEMM (gemm:jit,
// one small sgemm per head) ran those 32-row products at 40-60 GFLOP/s in the model.
int64_t block_rows(int64_t T) {
  const int64_t nb = T >= 64 ? std::min<int64_t>(8, T / 64) : 1;
  return (T + nb - 1) / nb;
}

// Heads are processed in groups whose (T, T) score matrices together stay within
// kGroupBytes, so that the GEMM writing a block of scores, the softmax over it and the GEMM
// reading it back find it in the (shared) last-level cache. A group is either several whole sequences (all NH heads)
// or some heads of one sequence; either way its att slice is contiguous.
// 16 MiB measured a little faster than 1 or 4 MiB (fewer, larger GEMMs) and than no
// grouping at T = 1024; it is one group per 4 heads there and a single group for gpt-mini.
constexpr int64_t kGroupBytes = int64_t{16} << 20;

struct Group {
  int64_t b0, nb, h0, nh;
};

std::vector<Group> groups(int64_t B, int64_t T, int64_t NH) {
  const int64_t heads = std::max<int64_t>(1, kGroupBytes / (T * T * static_cast<int64_t>(sizeof(float))));
  std::vector<Group> out;
  if (heads >= NH) {
    const int64_t nb = std::min(B, heads / NH);
    for (int64_t b0 = 0; b0 < B; b0 += nb) out.push_back({b0, std::min(nb, B - b0), 0, NH});
  } else {
    for (int64_t b0 = 0; b0 < B; ++b0)
      for (int64_t h0 = 0; h0 < NH; h0 += heads) out.push_back({b0, 1, h0, std::min(heads, NH - h0)});
  }
  return out;
}

// Strided (batch0, batch1, rows, cols) views for a group of nb sequences x nh heads; strides
// are those of the full tensors, so a group is just a base pointer and smaller batch counts.
struct Views {
  int64_t nb, nh, T, C, NH, HS;
  // (nb, nh, T, HS) views of q/k/v inside qkv (B, T, 3C), or of dqkv.
  std::array<int64_t, 4> qkv_rows() const { return {T * 3 * C, HS, 3 * C, 1}; }
  // The same, transposed to (nb, nh, HS, T): K^T and V^T as right operands.
  std::array<int64_t, 4> qkv_cols() const { return {T * 3 * C, HS, 1, 3 * C}; }
  // (nb, nh, T, HS) view of out / dout (B, T, NH, HS).
  std::array<int64_t, 4> out_rows() const { return {T * C, HS, C, 1}; }
  // (nb, nh, T, T) att / datt, and its transpose.
  std::array<int64_t, 4> att_rows() const { return {NH * T * T, T * T, T, 1}; }
  std::array<int64_t, 4> att_cols() const { return {NH * T * T, T * T, 1, T}; }

  BatchedMatmul desc(int64_t M, int64_t N, int64_t K, const std::array<int64_t, 4>& a,
                     const std::array<int64_t, 4>& b, const std::array<int64_t, 4>& c,
                     float alpha = 1.0f) const {
    return BatchedMatmul{.batch0 = nb, .batch1 = nh, .M = M, .N = N, .K = K,
                         .a_strides = a, .b_strides = b, .c_strides = c, .alpha = alpha};
  }
};

// Row i is processed up to the next multiple of 16 columns, with j > i masked by selects (or,
// with AVX-512, by lane masks) rather than ending the loop at i: the vector loops then have no
// scalar remainder, which for rows of a few hundred elements halved the softmax time. Masked
// columns may hold anything (never written, or stale), so they are only ever read under a mask.
[[maybe_unused]] int64_t padded_row(int64_t i, int64_t T) { return std::min(T, (i + 16) & ~int64_t{15}); }

#if LOOM_FAST_MATH_AVX512
// The softmax passes below are written with AVX-512 intrinsics when available: GCC vectorised
// the portable loops at 256 bits with fast_exp's selects, and the forward softmax was 15% of
// the attention forward; the intrinsics version makes the attention forward ~15% faster.
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
#endif

// In place over rows [i0, i1) of heads (H, T, T) holding scaled scores in columns j <= i:
// row i becomes softmax over j <= i, and j > i becomes 0.
void causal_softmax(float* att, int64_t H, int64_t T, int64_t i0, int64_t i1) {
  const int64_t R = i1 - i0;
#pragma omp parallel for schedule(static) if (H * R * T >= (1 << 15))
  for (int64_t r = 0; r < H * R; ++r) {
    const int64_t i = i0 + r % R;
    float* __restrict row = att + (r / R * T + i) * T;  // (T)
#if LOOM_FAST_MATH_AVX512
    // 16-column chunks up to the one holding the diagonal; lanes j > i are masked (never
    // read, written as 0), so there is no scalar remainder and T need not be a multiple of 16.
    const int64_t chunks = i / 16 + 1;
    __m512 vm = _mm512_set1_ps(-INFINITY);
    for (int64_t c = 0; c < chunks; ++c) {
      const __mmask16 k = causal_mask(i, c * 16);
      vm = _mm512_mask_max_ps(vm, k, vm, _mm512_maskz_loadu_ps(k, row + c * 16));
    }
    const __m512 m = _mm512_set1_ps(hmax16(vm));
    __m512 vs = _mm512_setzero_ps();
    for (int64_t c = 0; c < chunks; ++c) {
      const __mmask16 k = causal_mask(i, c * 16);
      const __m512 e = _mm512_maskz_mov_ps(k, fast_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, row + c * 16), m)));
      vs = _mm512_add_ps(vs, e);
      _mm512_mask_storeu_ps(row + c * 16, k | __mmask16(c * 16 + 16 <= T ? 0xFFFF : (1u << (T - c * 16)) - 1), e);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / hsum16(vs));
    for (int64_t c = 0; c < chunks; ++c) {
      const __mmask16 k = causal_mask(i, c * 16);
      _mm512_mask_storeu_ps(row + c * 16, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, row + c * 16), inv));
    }
    const int64_t written = std::min(T, chunks * 16);
    std::memset(row + written, 0, sizeof(float) * (T - written));
#else
    const int64_t n = padded_row(i, T);
    float m = -INFINITY;
    // A select, not std::max: GCC vectorises std::max's NaN-ordering poorly here.
#pragma omp simd reduction(max : m) simdlen(16)
    for (int64_t j = 0; j < n; ++j) {
      // The load is unconditional (a conditional one kept the AVX2 loop scalar); masked
      // columns may hold anything, and the select drops them.
      const float r = row[j];
      const float x = j <= i ? r : -INFINITY;
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
    std::memset(row + n, 0, sizeof(float) * (T - n));
#endif
  }
}

// In place over rows [i0, i1) of heads (H, T, T) of datt holding dP in columns j <= i:
// becomes dS = P * (dP - sum_k P dP), the softmax backward, and 0 for j > i.
void causal_softmax_backward(float* datt, const float* att, int64_t H, int64_t T, int64_t i0, int64_t i1) {
  const int64_t R = i1 - i0;
#pragma omp parallel for schedule(static) if (H * R * T >= (1 << 15))
  for (int64_t r = 0; r < H * R; ++r) {
    const int64_t i = i0 + r % R;
    float* __restrict d = datt + (r / R * T + i) * T;       // (T)
    const float* __restrict p = att + (r / R * T + i) * T;  // (T), exactly 0 for j > i
#if LOOM_FAST_MATH_AVX512
    const int64_t chunks = i / 16 + 1;
    __m512 vdot = _mm512_setzero_ps();
    for (int64_t c = 0; c < chunks; ++c) {
      const __mmask16 k = causal_mask(i, c * 16);
      vdot = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, p + c * 16), _mm512_maskz_loadu_ps(k, d + c * 16), vdot);
    }
    const __m512 dot = _mm512_set1_ps(hsum16(vdot));
    for (int64_t c = 0; c < chunks; ++c) {
      const __mmask16 k = causal_mask(i, c * 16);
      const __mmask16 in_row = c * 16 + 16 <= T ? __mmask16(0xFFFF) : __mmask16((1u << (T - c * 16)) - 1);
      const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + c * 16),
                                     _mm512_sub_ps(_mm512_maskz_loadu_ps(k, d + c * 16), dot));
      _mm512_mask_storeu_ps(d + c * 16, in_row, _mm512_maskz_mov_ps(k, v));
    }
    const int64_t written = std::min(T, chunks * 16);
    std::memset(d + written, 0, sizeof(float) * (T - written));
#else
    const int64_t n = padded_row(i, T);
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < n; ++j) dot += j <= i ? p[j] * d[j] : 0.0f;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) d[j] = j <= i ? p[j] * (d[j] - dot) : 0.0f;
    std::memset(d + n, 0, sizeof(float) * (T - n));
#endif
  }
}

// Rows [i0, i1) of a group's probabilities, written into a (the group's (nb * nh, T, T)
// block): S = scale Q K^T against keys [0, i1), then the causal softmax over it.
void probabilities(const Views& v, const float* q, const float* k, float* a, int64_t i0, int64_t i1, float scale) {
  batched_matmul(v.desc(i1 - i0, i1, v.HS, v.qkv_rows(), v.qkv_cols(), v.att_rows(), scale), q + i0 * 3 * v.C, k,
                 a + i0 * v.T);
  causal_softmax(a, v.nb * v.nh, v.T, i0, i1);
}

// A scratch for the largest group's (nb * nh, T, T) scores, where att is not kept.
Tensor group_scratch(int64_t B, int64_t T, int64_t NH) { return Tensor::empty({attention_group_values(B, T, NH)}); }

}  // namespace

int64_t attention_group_values(int64_t B, int64_t T, int64_t NH) {
  int64_t most = 0;
  for (const Group& g : groups(B, T, NH)) most = std::max(most, g.nb * g.nh * T * T);
  return most;
}

void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH) {
  const int64_t HS = C / NH, blk = block_rows(T);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const Tensor scratch = att == nullptr ? group_scratch(B, T, NH) : Tensor();
  for (const Group& g : groups(B, T, NH)) {
    const Views v{g.nb, g.nh, T, C, NH, HS};
    const float* q = qkv + g.b0 * T * 3 * C + g.h0 * HS;  // (nb, T, nh, HS) inside qkv
    const float* k = q + C;                               // (nb, T, nh, HS) inside qkv
    const float* val = q + 2 * C;                         // (nb, T, nh, HS) inside qkv
    // (nb * nh, T, T), contiguous: inside att, or the scratch reused by every group
    float* a = att != nullptr ? att + (g.b0 * NH + g.h0) * T * T : scratch.f32();
    float* o = out + g.b0 * T * C + g.h0 * HS;  // (nb, T, nh, HS) inside out
    for (int64_t i0 = 0; i0 < T; i0 += blk) {
      const int64_t i1 = std::min(T, i0 + blk);
      // S[i0:i1, 0:i1] = scale * Q[i0:i1] K[0:i1]^T; softmax; out[i0:i1] = P[i0:i1, 0:i1] V[0:i1].
      probabilities(v, q, k, a, i0, i1, scale);
      batched_matmul(v.desc(i1 - i0, HS, i1, v.att_rows(), v.qkv_rows(), v.out_rows()), a + i0 * T, val,
                     o + i0 * C);
    }
  }
}

void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att,
                        int64_t B, int64_t T, int64_t C, int64_t NH) {
  const int64_t HS = C / NH, blk = block_rows(T);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const bool recompute = att == nullptr;
  const Tensor p_scratch = recompute ? group_scratch(B, T, NH) : Tensor();
  const Tensor dp_scratch = recompute ? group_scratch(B, T, NH) : Tensor();
  for (const Group& g : groups(B, T, NH)) {
    const Views v{g.nb, g.nh, T, C, NH, HS};
    const int64_t qkv_off = g.b0 * T * 3 * C + g.h0 * HS, att_off = (g.b0 * NH + g.h0) * T * T;
    const float* q = qkv + qkv_off;                     // (nb, T, nh, HS) inside qkv
    const float* k = q + C;                             // (nb, T, nh, HS) inside qkv
    const float* val = q + 2 * C;                       // (nb, T, nh, HS) inside qkv
    float* dq = dqkv + qkv_off;                         // (nb, T, nh, HS) inside dqkv
    float* dk = dq + C;                                 // (nb, T, nh, HS) inside dqkv
    float* dv = dq + 2 * C;                             // (nb, T, nh, HS) inside dqkv
    const float* dO = dout + g.b0 * T * C + g.h0 * HS;  // (nb, T, nh, HS) inside dout
    // (nb * nh, T, T), contiguous: inside att and datt, or the scratches reused by every group
    const float* a = recompute ? p_scratch.f32() : att + att_off;
    float* da = recompute ? dp_scratch.f32() : datt + att_off;
    if (recompute)  // the forward's probabilities again: the same products on the same operands
      for (int64_t i0 = 0; i0 < T; i0 += blk) probabilities(v, q, k, p_scratch.f32(), i0, std::min(T, i0 + blk), scale);
    for (int64_t i0 = 0; i0 < T; i0 += blk) {
      const int64_t i1 = std::min(T, i0 + blk);
      // dP[i0:i1, 0:i1] = dO[i0:i1] V[0:i1]^T; dS by the softmax backward;
      // dQ[i0:i1] = scale * dS[i0:i1, 0:i1] K[0:i1].
      batched_matmul(v.desc(i1 - i0, i1, HS, v.out_rows(), v.qkv_cols(), v.att_rows()), dO + i0 * C, val,
                     da + i0 * T);
      causal_softmax_backward(da, a, g.nb * g.nh, T, i0, i1);
      batched_matmul(v.desc(i1 - i0, HS, i1, v.att_rows(), v.qkv_rows(), v.qkv_rows(), scale), da + i0 * T, k,
                     dq + i0 * 3 * C);
    }
    // Key rows [j0, j1) only receive from query rows i >= j0 (causality), so once all of dS is
    // known: dK[j0:j1] = scale * dS[j0:T, j0:j1]^T Q[j0:T] and dV[j0:j1] = P[j0:T, j0:j1]^T dO[j0:T].
    // The transposed att/datt blocks include entries above the diagonal, which are exact zeros.
    for (int64_t j0 = 0; j0 < T; j0 += blk) {
      const int64_t j1 = std::min(T, j0 + blk);
      batched_matmul(v.desc(j1 - j0, HS, T - j0, v.att_cols(), v.qkv_rows(), v.qkv_rows(), scale),
                     da + j0 * T + j0, q + j0 * 3 * C, dk + j0 * 3 * C);
      batched_matmul(v.desc(j1 - j0, HS, T - j0, v.att_cols(), v.out_rows(), v.qkv_rows()), a + j0 * T + j0,
                     dO + j0 * C, dv + j0 * 3 * C);
    }
  }
}

}  // namespace loom::kernels
