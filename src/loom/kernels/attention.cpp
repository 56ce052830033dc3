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

#include "loom/kernels/fast_math.hpp"
#include "loom/kernels/matmul.hpp"

namespace loom::kernels {

namespace {

// Rows per causal block. Short sequences use one block (the plain full product); longer ones
// use up to 8 blocks of >= 32 rows, which does ~(nb + 1) / (2 nb) of the full work while each
// GEMM stays big enough for oneDNN to run near peak.
int64_t block_rows(int64_t T) {
  const int64_t nb = T >= 64 ? std::min<int64_t>(8, T / 32) : 1;
  return (T + nb - 1) / nb;
}

struct Views {
  int64_t B, T, C, NH, HS;
  // (B, NH, T, HS) views of q/k/v inside qkv (B, T, 3C), or of dqkv.
  std::array<int64_t, 4> qkv_rows() const { return {T * 3 * C, HS, 3 * C, 1}; }
  // The same, transposed to (B, NH, HS, T): K^T and V^T as right operands.
  std::array<int64_t, 4> qkv_cols() const { return {T * 3 * C, HS, 1, 3 * C}; }
  // (B, NH, T, HS) view of out / dout (B, T, NH, HS).
  std::array<int64_t, 4> out_rows() const { return {T * C, HS, C, 1}; }
  // (B, NH, T, T) att / datt, and its transpose.
  std::array<int64_t, 4> att_rows() const { return {NH * T * T, T * T, T, 1}; }
  std::array<int64_t, 4> att_cols() const { return {NH * T * T, T * T, 1, T}; }

  BatchedMatmul desc(int64_t M, int64_t N, int64_t K, const std::array<int64_t, 4>& a,
                     const std::array<int64_t, 4>& b, const std::array<int64_t, 4>& c,
                     float alpha = 1.0f) const {
    BatchedMatmul d;
    d.batch0 = B;
    d.batch1 = NH;
    d.M = M;
    d.N = N;
    d.K = K;
    d.a_strides = a;
    d.b_strides = b;
    d.c_strides = c;
    d.alpha = alpha;
    return d;
  }
};

// Row i is processed up to the next multiple of 16 columns, with j > i masked by selects
// rather than ending the loop at i: the vector loops then have no scalar remainder, which
// for rows of a few hundred elements halved the softmax time. Masked columns may hold
// anything (never written, or stale), so they are only ever read under a select.
int64_t padded_row(int64_t i, int64_t T) { return std::min(T, (i + 16) & ~int64_t{15}); }

// In place over att (B, NH, T, T) holding scaled scores in columns j <= i: row i becomes
// softmax over j <= i, and j > i becomes 0.
void causal_softmax(float* att, int64_t BNH, int64_t T) {
#pragma omp parallel for schedule(static) if (BNH * T * T >= (1 << 15))
  for (int64_t r = 0; r < BNH * T; ++r) {
    const int64_t i = r % T, n = padded_row(i, T);
    float* __restrict row = att + r * T;  // (T)
    float m = -INFINITY;
    // A select, not std::max: GCC vectorises std::max's NaN-ordering poorly here.
#pragma omp simd reduction(max : m) simdlen(16)
    for (int64_t j = 0; j < n; ++j) {
      const float x = j <= i ? row[j] : -INFINITY;
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
  }
}

// In place over datt (B, NH, T, T) holding dP in columns j <= i: becomes
// dS = P * (dP - sum_k P dP), the softmax backward, and 0 for j > i.
void causal_softmax_backward(float* datt, const float* att, int64_t BNH, int64_t T) {
#pragma omp parallel for schedule(static) if (BNH * T * T >= (1 << 15))
  for (int64_t r = 0; r < BNH * T; ++r) {
    const int64_t i = r % T, n = padded_row(i, T);
    float* __restrict d = datt + r * T;       // (T)
    const float* __restrict p = att + r * T;  // (T), exactly 0 for j > i
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < n; ++j) dot += j <= i ? p[j] * d[j] : 0.0f;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) d[j] = j <= i ? p[j] * (d[j] - dot) : 0.0f;
    std::memset(d + n, 0, sizeof(float) * (T - n));
  }
}

}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH) {
  const Views v{B, T, C, NH, C / NH};
  const float scale = 1.0f / std::sqrt(static_cast<float>(v.HS));
  const int64_t blk = block_rows(T);
  const float* q = qkv;          // (B, T, NH, HS) inside qkv
  const float* k = qkv + C;      // (B, T, NH, HS) inside qkv
  const float* val = qkv + 2 * C;  // (B, T, NH, HS) inside qkv
  // S[i0:i1, 0:i1] = scale * Q[i0:i1] K[0:i1]^T, into att (B, NH, T, T).
  for (int64_t i0 = 0; i0 < T; i0 += blk) {
    const int64_t i1 = std::min(T, i0 + blk);
    batched_matmul(v.desc(i1 - i0, i1, v.HS, v.qkv_rows(), v.qkv_cols(), v.att_rows(), scale),
                   q + i0 * 3 * C, k, att + i0 * T);
  }
  causal_softmax(att, B * NH, T);
  // out[i0:i1] = P[i0:i1, 0:i1] V[0:i1], written as (B, T, NH, HS).
  for (int64_t i0 = 0; i0 < T; i0 += blk) {
    const int64_t i1 = std::min(T, i0 + blk);
    batched_matmul(v.desc(i1 - i0, v.HS, i1, v.att_rows(), v.qkv_rows(), v.out_rows()), att + i0 * T,
                   val, out + i0 * C);
  }
}

void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att,
                        int64_t B, int64_t T, int64_t C, int64_t NH) {
  const Views v{B, T, C, NH, C / NH};
  const float scale = 1.0f / std::sqrt(static_cast<float>(v.HS));
  const int64_t blk = block_rows(T);
  const float* q = qkv;            // (B, T, NH, HS) inside qkv
  const float* k = qkv + C;        // (B, T, NH, HS) inside qkv
  const float* val = qkv + 2 * C;  // (B, T, NH, HS) inside qkv
  float* dq = dqkv;                // (B, T, NH, HS) inside dqkv
  float* dk = dqkv + C;            // (B, T, NH, HS) inside dqkv
  float* dv = dqkv + 2 * C;        // (B, T, NH, HS) inside dqkv
  // dP[i0:i1, 0:i1] = dO[i0:i1] V[0:i1]^T, into datt.
  for (int64_t i0 = 0; i0 < T; i0 += blk) {
    const int64_t i1 = std::min(T, i0 + blk);
    batched_matmul(v.desc(i1 - i0, i1, v.HS, v.out_rows(), v.qkv_cols(), v.att_rows()), dout + i0 * C,
                   val, datt + i0 * T);
  }
  causal_softmax_backward(datt, att, B * NH, T);
  for (int64_t i0 = 0; i0 < T; i0 += blk) {
    const int64_t i1 = std::min(T, i0 + blk);
    // dQ[i0:i1] = scale * dS[i0:i1, 0:i1] K[0:i1].
    batched_matmul(v.desc(i1 - i0, v.HS, i1, v.att_rows(), v.qkv_rows(), v.qkv_rows(), scale),
                   datt + i0 * T, k, dq + i0 * 3 * C);
    // Key rows [j0, j1) = [i0, i1) only receive from query rows i >= j0 (causality):
    // dK[j0:j1] = scale * dS[j0:T, j0:j1]^T Q[j0:T] and dV[j0:j1] = P[j0:T, j0:j1]^T dO[j0:T].
    const int64_t j0 = i0, j1 = i1;
    batched_matmul(v.desc(j1 - j0, v.HS, T - j0, v.att_cols(), v.qkv_rows(), v.qkv_rows(), scale),
                   datt + j0 * T + j0, q + j0 * 3 * C, dk + j0 * 3 * C);
    batched_matmul(v.desc(j1 - j0, v.HS, T - j0, v.att_cols(), v.out_rows(), v.qkv_rows()),
                   att + j0 * T + j0, dout + j0 * C, dv + j0 * 3 * C);
  }
}

}  // namespace loom::kernels
