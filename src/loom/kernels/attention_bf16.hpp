// The causal attention of attention.hpp when its products run in bf16 (mixed precision).
// oneDNN 2.6's bf16 matmul (brgemm) takes dense operands only and falls back to a generic gemm,
// slower than fp32's, on strided views; so this path works on dense per-head operands: each
// causal block gathers its heads' rows of q, k, v (and of the output gradient) into dense bf16
// (heads, rows, HS) copies, and the scores of a block are a dense (heads, rows, keys) fp32
// scratch. As in FlashAttention, forward multiplies V by the unnormalised exp-scores (one pass
// over the scores writes them in bf16) and divides each output row by its sum, keeping the
// rows' log-sum-exp; backward recomputes the probabilities from it in the same pass that
// forms dS, and accumulates dK and dV block by block (dK[0:i1] += dS_b^T Q_b,
// dV[0:i1] += P_b^T dO_b), so it never holds more than one block of probabilities.
#pragma once

#include <cstdint>

#include "loom/kernels/attention_dropout.hpp"
#include "loom/kernels/matmul.hpp"

namespace loom::kernels {

// As attention_forward: out (B, T, C); att (B, NH, T, T) receives the probabilities and lse
// (B, NH, T) the rows' log-sum-exp, each when not null (att undropped). Dropout zeroes the
// dropped exp-scores in place and folds 1 / (1 - p) into each row's 1 / sum.
void attention_forward_bf16(float* out, float* att, float* lse, Operand qkv, int64_t B, int64_t T, int64_t C,
                            int64_t NH, const AttentionDropout& dropout = {});
// As attention_backward, always recomputing the probabilities (a block at a time): in one pass
// from lse, the forward's, when given, else after a max and sum pass of its own.
void attention_backward_bf16(float* dqkv, const float* dout, const float* lse, Operand qkv, int64_t B, int64_t T,
                             int64_t C, int64_t NH, const AttentionDropout& dropout = {});
// Bytes of the scratch attention_backward_bf16 holds while it runs (allocates it once to count).
int64_t attention_backward_bf16_bytes(int64_t B, int64_t T, int64_t C, int64_t NH);

}  // namespace loom::kernels
