// Causal multi-head self-attention with Q, K, V read in place from the (B, T, 3C) QKV buffer:
// every product is one oneDNN batched matmul over (B, NH) with strided views, so no head is
// copied. Causality is exploited by splitting query rows into blocks: the block of rows
// [i0, i1) only multiplies against keys [0, i1), which skips most of the upper triangle.
// Invariant: att holds the softmax probabilities with exact zeros above the diagonal, and the
// GEMMs only ever read att/datt columns that the softmax passes wrote.
// Products in bf16 go to attention_bf16.cpp, which works on dense per-block copies instead
// (oneDNN's bf16 kernel takes no strided views).
#include "loom/kernels/attention.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "loom/kernels/attention_bf16.hpp"
#include "loom/kernels/attention_plan.hpp"
#include "loom/kernels/causal_softmax.hpp"
#include "loom/kernels/matmul.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom::kernels {

namespace {

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
  // The rows of a group's (nb * nh, T, T) scores, for the softmax passes.
  ScoreRows full_rows() const { return {T * T, T, 0, T}; }
  // A (nb, nh, R, T) block of rows [i0, i0 + R) of them (dropout's scratch), and its rows.
  std::array<int64_t, 4> block_rows(int64_t R) const { return {nh * R * T, R * T, T, 1}; }
  ScoreRows block(int64_t i0, int64_t R) const { return {R * T, T, i0, T}; }

  BatchedMatmul desc(int64_t M, int64_t N, int64_t K, const std::array<int64_t, 4>& a,
                     const std::array<int64_t, 4>& b, const std::array<int64_t, 4>& c,
                     float alpha = 1.0f) const {
    return BatchedMatmul{.batch0 = nb, .batch1 = nh, .M = M, .N = N, .K = K,
                         .a_strides = a, .b_strides = b, .c_strides = c, .alpha = alpha};
  }
};

// Rows [i0, i1) of a group's probabilities, written into a (the group's (nb * nh, T, T)
// block): S = scale Q K^T against keys [0, i1), then the causal softmax over it.
void probabilities(const Views& v, Operand q, Operand k, float* a, int64_t i0, int64_t i1, float scale) {
  batched_matmul(v.desc(i1 - i0, i1, v.HS, v.qkv_rows(), v.qkv_cols(), v.att_rows(), scale), q.at(i0 * 3 * v.C), k,
                 a + i0 * v.T);
  causal_softmax(a, v.full_rows(), v.nb * v.nh, i0, i1);
}

// Whether the products run in bf16 (attention_bf16.hpp): bf16 q, k, v or bf16 compute precision.
bool bf16_products(const Operand& qkv) { return qkv.dtype == DType::BF16 || compute_precision() == Precision::BF16; }

// A scratch for the largest group's (nb * nh, T, T) scores, where att is not kept.
Tensor group_scratch(int64_t B, int64_t T, int64_t NH) { return Tensor::empty({attention_group_values(B, T, NH)}); }

// Rows [i0, i1) of a group's nb * nh heads of probabilities (or of their gradient) laid out as
// `rows`: each row's visible columns j <= i dropped (0) or kept (times `kept`), in place.
// d is the dropout seen from the group's first sequence and head.
void drop(float* m, const ScoreRows& rows, const Views& v, const AttentionDropout& d, int64_t i0, int64_t i1,
          float kept) {
#pragma omp parallel for collapse(2) schedule(static) if (v.nb * v.nh * (i1 - i0) * i1 >= (1 << 15))
  for (int64_t gh = 0; gh < v.nb * v.nh; ++gh)
    for (int64_t i = i0; i < i1; ++i) d.apply(m + rows.at(gh, i), i + 1, gh / v.nh, gh % v.nh, i, kept);
}

// Rows [i0, i1) of a group's dP (da) under dropout, each row's mask drawn once for both of its
// uses: dP dropped and scaled, the softmax backward from the undropped probabilities a (dS), then
// that row of a dropped in place for dV's product (its last use; later rows' softmax backward
// reads only their own). Each step computes what drop() and causal_softmax_backward() do, so the
// values are theirs bit for bit; drawing the mask for dP and again for dV hashed each visible
// probability three times a step, this twice.
void dropped_softmax_backward(float* da, float* a, const Views& v, const AttentionDropout& d, int64_t i0,
                              int64_t i1) {
  const ScoreRows rows = v.full_rows();
  const float kept = d.scale();
#pragma omp parallel if (v.nb * v.nh * (i1 - i0) * i1 >= (1 << 15))
  {
    std::vector<float> mask(static_cast<size_t>(i1));  // this thread's row of the mask
#pragma omp for collapse(2) schedule(static)
    for (int64_t gh = 0; gh < v.nb * v.nh; ++gh)
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t n = i + 1, at = rows.at(gh, i);
        const float* __restrict m = mask.data();
        float* __restrict dp = da + at;
        float* __restrict p = a + at;
        d.row_mask(mask.data(), n, gh / v.nh, gh % v.nh, i);
        for (int64_t j = 0; j < n; ++j) dp[j] = m[j] != 0.0f ? dp[j] * kept : 0.0f;
        causal_softmax_backward_row(dp, p, i, rows.cols);
        for (int64_t j = 0; j < n; ++j) p[j] = m[j] != 0.0f ? p[j] * kept : 0.0f;
      }
  }
}

// Rows [i0, i1) of a group's probabilities a, dropped, into the (nb, nh, i1 - i0, T) block
// `out`: the matrix the product with V reads (a keeps the probabilities for backward).
void dropped_block(const Views& v, const AttentionDropout& d, const float* a, float* out, int64_t i0, int64_t i1) {
  const ScoreRows whole = v.full_rows(), block = v.block(i0, i1 - i0);
#pragma omp parallel for collapse(2) schedule(static) if (v.nb * v.nh * (i1 - i0) * i1 >= (1 << 15))
  for (int64_t gh = 0; gh < v.nb * v.nh; ++gh)
    for (int64_t i = i0; i < i1; ++i) std::copy_n(a + whole.at(gh, i), i1, out + block.at(gh, i));
  drop(out, block, v, d, i0, i1, d.scale());
}

}  // namespace

int64_t attention_group_values(int64_t B, int64_t T, int64_t NH) {
  int64_t most = 0;
  for (const AttentionGroup& g : attention_groups(B, T, NH, T * T)) most = std::max(most, g.nb * g.nh * T * T);
  return most;
}

int64_t attention_dropout_block_values(int64_t B, int64_t T, int64_t NH) {
  return attention_group_values(B, T, NH) / T * attention_block_rows(T);
}

void attention_forward(float* out, float* att, Operand qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH, float* lse, const AttentionDropout& dropout) {
  if (bf16_products(qkv)) return attention_forward_bf16(out, att, lse, qkv, B, T, C, NH, dropout);
  const int64_t HS = C / NH, blk = attention_block_rows(T);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const Tensor scratch = att == nullptr ? group_scratch(B, T, NH) : Tensor();
  const Tensor dropped = dropout.active() ? Tensor::empty({attention_dropout_block_values(B, T, NH)}) : Tensor();
  for (const AttentionGroup& g : attention_groups(B, T, NH, T * T)) {
    const Views v{g.nb, g.nh, T, C, NH, HS};
    const Operand q = qkv.at(g.b0 * T * 3 * C + g.h0 * HS);  // (nb, T, nh, HS) inside qkv
    const Operand k = q.at(C);                                // (nb, T, nh, HS) inside qkv
    const Operand val = q.at(2 * C);                          // (nb, T, nh, HS) inside qkv
    // (nb * nh, T, T), contiguous: inside att, or the scratch reused by every group
    float* a = att != nullptr ? att + (g.b0 * NH + g.h0) * T * T : scratch.f32();
    float* o = out + g.b0 * T * C + g.h0 * HS;  // (nb, T, nh, HS) inside out
    for (int64_t i0 = 0; i0 < T; i0 += blk) {
      const int64_t i1 = std::min(T, i0 + blk);
      // S[i0:i1, 0:i1] = scale * Q[i0:i1] K[0:i1]^T; softmax; out[i0:i1] = P[i0:i1, 0:i1] V[0:i1],
      // with P dropped under dropout.
      probabilities(v, q, k, a, i0, i1, scale);
      const float* p = a + i0 * T;
      std::array<int64_t, 4> p_rows = v.att_rows();
      if (dropout.active()) {
        dropped_block(v, dropout.shifted(g.b0, g.h0), a, dropped.f32(), i0, i1);
        p = dropped.f32();
        p_rows = v.block_rows(i1 - i0);
      }
      batched_matmul(v.desc(i1 - i0, HS, i1, p_rows, v.qkv_rows(), v.out_rows()), p, val, o + i0 * C);
    }
  }
}

void attention_backward(float* dqkv, float* datt, const float* dout, Operand qkv, float* att,
                        int64_t B, int64_t T, int64_t C, int64_t NH, const float* lse,
                        const AttentionDropout& dropout) {
  if (bf16_products(qkv)) return attention_backward_bf16(dqkv, dout, lse, qkv, B, T, C, NH, dropout);
  const int64_t HS = C / NH, blk = attention_block_rows(T);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const bool recompute = att == nullptr;
  const Tensor p_scratch = recompute ? group_scratch(B, T, NH) : Tensor();
  const Tensor dp_scratch = recompute ? group_scratch(B, T, NH) : Tensor();
  for (const AttentionGroup& g : attention_groups(B, T, NH, T * T)) {
    const Views v{g.nb, g.nh, T, C, NH, HS};
    const int64_t qkv_off = g.b0 * T * 3 * C + g.h0 * HS, att_off = (g.b0 * NH + g.h0) * T * T;
    const Operand q = qkv.at(qkv_off);                  // (nb, T, nh, HS) inside qkv
    const Operand k = q.at(C);                          // (nb, T, nh, HS) inside qkv
    const Operand val = q.at(2 * C);                    // (nb, T, nh, HS) inside qkv
    float* dq = dqkv + qkv_off;                         // (nb, T, nh, HS) inside dqkv
    float* dk = dq + C;                                 // (nb, T, nh, HS) inside dqkv
    float* dv = dq + 2 * C;                             // (nb, T, nh, HS) inside dqkv
    const float* dO = dout + g.b0 * T * C + g.h0 * HS;  // (nb, T, nh, HS) inside dout
    // (nb * nh, T, T), contiguous: inside att and datt, or the scratches reused by every group
    float* a = recompute ? p_scratch.f32() : att + att_off;
    const AttentionDropout d = dropout.shifted(g.b0, g.h0);
    float* da = recompute ? dp_scratch.f32() : datt + att_off;
    if (recompute)  // the forward's probabilities again: the same products on the same operands
      for (int64_t i0 = 0; i0 < T; i0 += blk) probabilities(v, q, k, p_scratch.f32(), i0, std::min(T, i0 + blk), scale);
    for (int64_t i0 = 0; i0 < T; i0 += blk) {
      const int64_t i1 = std::min(T, i0 + blk);
      // dP[i0:i1, 0:i1] = dO[i0:i1] V[0:i1]^T (times the mask under dropout); dS by the softmax
      // backward; dQ[i0:i1] = scale * dS[i0:i1, 0:i1] K[0:i1].
      batched_matmul(v.desc(i1 - i0, i1, HS, v.out_rows(), v.qkv_cols(), v.att_rows()), dO + i0 * C, val,
                     da + i0 * T);
      if (dropout.active())
        dropped_softmax_backward(da, a, v, d, i0, i1);
      else
        causal_softmax_backward(da, a, v.full_rows(), g.nb * g.nh, i0, i1);
      batched_matmul(v.desc(i1 - i0, HS, i1, v.att_rows(), v.qkv_rows(), v.qkv_rows(), scale), da + i0 * T, k,
                     dq + i0 * 3 * C);
    }
    // dV reads the probabilities as forward's product did: dropped (dropped_softmax_backward).
    // Key rows [j0, j1) only receive from query rows i >= j0 (causality), so once all of dS is
    // known: dK[j0:j1] = scale * dS[j0:T, j0:j1]^T Q[j0:T] and dV[j0:j1] = P[j0:T, j0:j1]^T dO[j0:T].
    // The transposed att/datt blocks include entries above the diagonal, which are exact zeros.
    for (int64_t j0 = 0; j0 < T; j0 += blk) {
      const int64_t j1 = std::min(T, j0 + blk);
      batched_matmul(v.desc(j1 - j0, HS, T - j0, v.att_cols(), v.qkv_rows(), v.qkv_rows(), scale),
                     da + j0 * T + j0, q.at(j0 * 3 * C), dk + j0 * 3 * C);
      batched_matmul(v.desc(j1 - j0, HS, T - j0, v.att_cols(), v.out_rows(), v.qkv_rows()), a + j0 * T + j0,
                     dO + j0 * C, dv + j0 * 3 * C);
    }
  }
}

}  // namespace loom::kernels
