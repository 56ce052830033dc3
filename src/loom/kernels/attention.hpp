// Causal multi-head self-attention, softmax(Q K^T / sqrt(HS) + mask) V, reading Q, K and V
// in place from the QKV projection's output. In fp32 the two products per head are batched
// oneDNN matmuls over (B, NH) with strided views, so no head is ever copied out; in bf16 they
// read dense bf16 copies of each causal block's rows (attention_bf16.hpp).
#pragma once

#include <cstdint>

#include "loom/kernels/attention_dropout.hpp"
#include "loom/kernels/matmul.hpp"

namespace loom::kernels {

// out (B, T, C) heads interleaved as (B, T, NH, HS); att (B, NH, T, T) softmax
// probabilities saved for backward (entries above the diagonal are 0), or null: not kept
// (a scratch of one group of heads at a time); qkv (B, T, 3C) laid out as [q | k | v], each (NH, HS),
// fp32 or bf16: under mixed precision the layer passes the bf16 copy it keeps for backward, so
// the products gather their operands from it instead of rounding q, k and v again per product.
// lse (B, NH, T), when not null and the products run in bf16, receives the rows' log-sum-exp
// of the scaled scores: given back to backward, it rebuilds the probabilities in one pass
// (fp32 products keep att instead, and leave lse as it is).
// dropout (attention_dropout.hpp), when active, drops probabilities before the product with V;
// att keeps them undropped, as backward needs them.
void attention_forward(float* out, float* att, Operand qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH, float* lse = nullptr, const AttentionDropout& dropout = {});
// dqkv (B, T, 3C) overwritten; datt (B, NH, T, T) scratch; dout (B, T, C). With att and datt
// null, the probabilities are recomputed from qkv one group of heads at a time into scratches
// of a group's size: the backward of a forward that did not keep them. In fp32 bit for bit as
// forward computed them (the same products and softmax on the same operands); with bf16
// products as exp(S - lse), lse being what forward wrote there, or, when null, found again
// from S by the forward's own pass (the same values either way). dropout: the forward's; when
// active, att is overwritten with the dropped probabilities (read by dV's product, the last use).
void attention_backward(float* dqkv, float* datt, const float* dout, Operand qkv, float* att,
                        int64_t B, int64_t T, int64_t C, int64_t NH, const float* lse = nullptr,
                        const AttentionDropout& dropout = {});
// The values of the largest group of heads' (T, T) scores: the size of each scratch the
// paths without att use.
int64_t attention_group_values(int64_t B, int64_t T, int64_t NH);
// The values of the scratch fp32 forward takes under dropout: the largest group's dropped
// probabilities of one causal block of rows (the matrix the product with V reads).
int64_t attention_dropout_block_values(int64_t B, int64_t T, int64_t NH);

}  // namespace loom::kernels
