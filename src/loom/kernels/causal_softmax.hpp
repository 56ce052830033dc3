// The causal softmax passes of attention, over rows of score matrices held either whole
// (heads, T, T) or as one causal block of them, dense (heads, rows, keys): row i keeps columns
// j <= i and the columns after it become 0. Under bf16 products each pass can also write its
// result rounded to bf16, in the same layout, for the GEMM that reads it next (the pass already
// holds the values, so no second sweep over them).
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
// softmax over j <= i, and j > i becomes 0. bf16, when given, receives the same values rounded.
void causal_softmax(float* scores, const ScoreRows& rows, int64_t H, int64_t i0, int64_t i1,
                    bfloat16* bf16 = nullptr);

// In place over rows [i0, i1) of H heads of d holding dP in columns j <= i, with p the
// probabilities in the same layout (exactly 0 for j > i): d becomes dS = P * (dP - sum_k P dP),
// the softmax backward, and 0 for j > i. bf16, when given, receives dS rounded.
void causal_softmax_backward(float* d, const float* p, const ScoreRows& rows, int64_t H, int64_t i0, int64_t i1,
                             bfloat16* bf16 = nullptr);

}  // namespace loom::kernels
