// Attention of a block of query rows against a block of key rows with an online softmax
// (running max and sum), so a rank can fold in the keys of a long sequence one block at a
// time (the ring attention of context parallelism) and get the causal attention over all
// of them. Every product is one oneDNN batched matmul over (B, NH) with strided views.
#pragma once

#include <cstdint>
#include <type_traits>

#include "loom/kernels/attention_dropout.hpp"

namespace loom::kernels {

// (B, rows, NH, HS) strided view of heads: element (b, i, h, d) at data[b * batch + i * row + h * HS + d].
template <class T>
struct HeadsOf {
  T* data;
  int64_t batch, row;
  operator HeadsOf<const T>() const requires(!std::is_const_v<T>) { return {data, batch, row}; }
};
using HeadsView = HeadsOf<const float>;
using HeadsOut = HeadsOf<float>;

// Per-row values (B, NH, rows): element (b, h, i) at data[b * batch + h * head + i].
template <class T>
struct RowsOf {
  T* data;
  int64_t batch, head;
  operator RowsOf<const T>() const requires(!std::is_const_v<T>) { return {data, batch, head}; }
};

struct AttentionBlock {
  int64_t B, NH, HS;
  int64_t Tq, Tk;  // query rows, key rows
  bool diagonal;   // the block on the causal diagonal (Tq == Tk, key j visible to query i iff j <= i); else all visible
};

// Rows of the running state before the first block: max -inf, sum 0, acc 0.
void attention_block_start(const AttentionBlock& shape, HeadsOut acc, RowsOf<float> row_max, RowsOf<float> row_sum);
// Folds one key block in: acc (the unnormalised output), row_max and row_sum are rescaled to
// the new running max and the block's exp-scores added. scores: B * NH * Tq * Tk floats of scratch.
// dropout (seen from the block's first sequence, head, query and key): the exp-scores are
// dropped after their sum is taken, so the output is the dropped probabilities times V.
void attention_block_forward(const AttentionBlock& shape, HeadsView q, HeadsView k, HeadsView v, HeadsOut acc,
                             RowsOf<float> row_max, RowsOf<float> row_sum, float* scores,
                             const AttentionDropout& dropout = {});
// After the last block: acc becomes the attention output and row_max the rows' log-sum-exp.
void attention_block_finish(const AttentionBlock& shape, HeadsOut acc, RowsOf<float> row_max, RowsOf<const float> row_sum);

// delta (b, h, i) = sum_d dout * out: the softmax backward's row term.
void attention_row_delta(const AttentionBlock& shape, HeadsView out, HeadsView dout, RowsOf<float> delta);
// One block's gradients, accumulated: dq += scale dS K, dk += scale dS^T Q, dv += P^T dout, with
// P = exp(scale Q K^T - lse) and dS = P (dout V^T - delta). scores, dscores: B * NH * Tq * Tk floats each.
// Under the forward's dropout M: dv += (P M)^T dout and dS = P (M dout V^T - delta) (delta, from
// the dropped output, is still the row's sum of P dP).
void attention_block_backward(const AttentionBlock& shape, HeadsView q, HeadsView k, HeadsView v, HeadsView dout,
                              RowsOf<const float> lse, RowsOf<const float> delta, HeadsOut dq, HeadsOut dk,
                              HeadsOut dv, float* scores, float* dscores, const AttentionDropout& dropout = {});

}  // namespace loom::kernels
