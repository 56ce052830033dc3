// The causal softmax passes of attention, over rows of score matrices held either whole
// (heads, T, T) or as one causal block of them, dense (heads, rows, keys): row i keeps columns
// j <= i and the columns after it become 0. The bf16 attention's passes write their results
// rounded to bf16, in the same layout, for the GEMM that reads them next (the pass already holds
// the values, so no second sweep over them).
#pragma once

#include <cstdint>

#include "loom/tensor/dtype.hpp"

namespace loom::kernels {

// Row i (first_row <= i) of head h starts at element h * head_stride + (i - first_row) * row_stride;
// a row has `cols` columns that may be written (T, or a block's key count; always > i).
struct ScoreRows {
  int64_t head_stride, row_stride, first_row, cols;
  int64_t at(int64_t h, int64_t i) const { return h * head_stride + (i - first_row) * row_stride; }
};

// In place over rows [i0, i1) of H heads holding scaled scores in columns j <= i: row i becomes
// softmax over j <= i, and j > i becomes 0.
void causal_softmax(float* scores, const ScoreRows& rows, int64_t H, int64_t i0, int64_t i1);

// In place over rows [i0, i1) of H heads of d holding dP in columns j <= i, with p the
// probabilities in the same layout (exactly 0 for j > i): d becomes dS = P * (dP - sum_k P dP),
// the softmax backward, and 0 for j > i.
void causal_softmax_backward(float* d, const float* p, const ScoreRows& rows, int64_t H, int64_t i0, int64_t i1);
// Its row i alone: dr and pr that row of d and p, `cols` columns.
void causal_softmax_backward_row(float* dr, const float* pr, int64_t i, int64_t cols);

// The two passes of the bf16 attention (attention_bf16.cpp), FlashAttention's order. Row r of a
// call is row i = i0 + r % R of head r / R (R = i1 - i0); per-row values are dense, index r.
//
// Forward, without normalising: row i's e_j = exp(s_j - max) for j <= i, rounded to bf16 into
// `e` (0 for i < j < cols); the scores are only read. 1 / sum_j e_j goes to inv_sum[r] and the
// log-sum-exp max + log(sum) to lse[r]: the product E V is scaled by inv_sum row by row, and
// backward rebuilds the probabilities from lse in one pass, with no max or sum pass.
void causal_exp(const float* scores, const ScoreRows& rows, int64_t H, int64_t i0, int64_t i1, bfloat16* e,
                float* inv_sum, float* lse);

// Backward from the log-sum-exp: with s the scaled scores and dp = dO V^T in the same layout,
// row i's P = exp(s - lse[r]) replaces s (fp32, j <= i) and is rounded into p_bf16, and
// dS = P (dP - sum_k P dP) is rounded into ds_bf16 (both 0 for i < j < cols); dp is only read.
void causal_softmax_backward_from_lse(float* s, const float* dp, const ScoreRows& rows, int64_t H, int64_t i0,
                                      int64_t i1, const float* lse, bfloat16* p_bf16, bfloat16* ds_bf16);
// Its row i alone: pr, dr, p_row and ds_row that row of s, dp, p_bf16 and ds_bf16, `cols`
// columns, row_lse its log-sum-exp.
void causal_softmax_backward_from_lse_row(float* pr, const float* dr, int64_t i, int64_t cols, float row_lse,
                                          bfloat16* p_row, bfloat16* ds_row);

}  // namespace loom::kernels
