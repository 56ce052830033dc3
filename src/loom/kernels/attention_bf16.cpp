#include "loom/kernels/attention_bf16.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <exception>
#include <vector>

#include <omp.h>

#include "loom/kernels/attention_plan.hpp"
#include "loom/kernels/causal_softmax.hpp"
#include "loom/kernels/fast_math.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom::kernels {

namespace {

// One group's G = nb * nh heads, as (nb, T, nh, HS) views inside qkv, dqkv, out or dout, and
// the dense (nb, nh, rows, cols) operands the products take.
struct Heads {
  int64_t nb, nh, HS;
  int64_t G() const { return nb * nh; }
  // Strides of a dense (nb, nh, rows, cols) operand, and of one stored transposed ((cols, rows) per matrix).
  std::array<int64_t, 4> dense(int64_t rows, int64_t cols) const { return {nh * rows * cols, rows * cols, cols, 1}; }
  std::array<int64_t, 4> dense_t(int64_t rows, int64_t cols) const { return {nh * rows * cols, rows * cols, 1, rows}; }
  BatchedMatmul desc(int64_t M, int64_t N, int64_t K, std::array<int64_t, 4> a, std::array<int64_t, 4> b,
                     float alpha = 1.0f) const {
    return BatchedMatmul{.batch0 = nb, .batch1 = nh, .M = M, .N = N, .K = K, .a_strides = a, .b_strides = b,
                         .c_strides = dense(M, N), .alpha = alpha};
  }
};

// A (nb, T, nh, HS) view: element (b, t, h, d) at b * batch + t * row + h * HS + d.
struct View {
  int64_t batch, row;
  int64_t at(const Heads& g, int64_t head, int64_t t) const { return head / g.nh * batch + t * row + head % g.nh * g.HS; }
};

bool worth_threads(int64_t values) { return values >= (1 << 15); }

// Only one causal block's scores exist at a time here, so a group's budget is for a block's
// scores: 1 MiB of them, measured against 0.5, 2, 4 and 16 MiB (AVX512-BF16, 1 and 2 threads):
// gpt-mini's backward 16 heads a group 6.6 / 3.6 ms against all 48 heads' 8.3 / 4.3 ms, gpt2-small's
// 2 heads within 5% of 4 (16 MiB: all 12 heads, 35% slower; the dense copies then outgrow the cache).
constexpr int64_t kBlockGroupBytes = int64_t{1} << 20;

std::vector<AttentionGroup> block_groups(int64_t B, int64_t T, int64_t NH) {
  return attention_groups(B, T, NH, std::min(T, attention_block_rows(T)) * T, kBlockGroupBytes);
}

// Rows [r0, r1) of every head of `src` (fp32, rounded on the way, or bf16) into dst (G, r1 - r0, HS).
void gather(Operand src, const View& v, const Heads& g, int64_t r0, int64_t r1, bfloat16* dst) {
  const int64_t R = r1 - r0;
#pragma omp parallel for collapse(2) schedule(static) if (worth_threads(g.G() * R * g.HS))
  for (int64_t h = 0; h < g.G(); ++h)
    for (int64_t r = 0; r < R; ++r) {
      const int64_t from = v.at(g, h, r0 + r);
      bfloat16* to = dst + (h * R + r) * g.HS;
      copy_run_to_bf16(src.at(from), to, g.HS);
    }
}

// src (G, r1 - r0, HS) into rows [r0, r1) of a view of dst: rows below added_below added to
// what dst holds (a sum over blocks), the others written; each row times row_scale[h * R + r]
// when given (the forward's 1 / sum of its exp-scores).
void scatter(const float* src, const View& v, const Heads& g, int64_t r0, int64_t r1, float* dst,
             int64_t added_below, const float* row_scale = nullptr) {
  const int64_t R = r1 - r0;
#pragma omp parallel for collapse(2) schedule(static) if (worth_threads(g.G() * R * g.HS))
  for (int64_t h = 0; h < g.G(); ++h)
    for (int64_t r = 0; r < R; ++r) {
      const float* from = src + (h * R + r) * g.HS;
      float* to = dst + v.at(g, h, r0 + r);
      if (r0 + r < added_below) {
#pragma omp simd
        for (int64_t d = 0; d < g.HS; ++d) to[d] += from[d];
      } else if (row_scale != nullptr) {
        const float scale = row_scale[h * R + r];
#pragma omp simd
        for (int64_t d = 0; d < g.HS; ++d) to[d] = from[d] * scale;
      } else {
        std::memcpy(to, from, sizeof(float) * g.HS);
      }
    }
}

// fn(head, row) for each of a causal block's G heads x R rows (of `cols` keys): on the threads
// when called outside a parallel region and worth it, else on this thread (a thread's share).
template <class Fn>
void for_each_block_row(const Heads& g, int64_t R, int64_t cols, Fn&& fn) {
#pragma omp parallel for collapse(2) schedule(static) if (!omp_in_parallel() && worth_threads(g.G() * R * cols))
  for (int64_t h = 0; h < g.G(); ++h)
    for (int64_t r = 0; r < R; ++r) fn(h, r);
}

// One thread's share of the scratch: pointers into Scratch's tensors.
struct Buffers {
  float *scores, *dscores, *rows_out, *dk, *dv, *inv_sum, *lse;
  bfloat16 *scores_bf16, *dscores_bf16, *q, *dout, *k, *v;
};

// Scratch for the largest group and block, allocated once per call (the caching allocator
// hands the same blocks back every layer); part(p, parts) is the p-th of `parts` equal shares,
// one a thread when the threads split each group's heads (for_each_block).
struct Scratch {
  Tensor scores, scores_bf16;    // (G, rows, keys): S (then P in backward), exp-scores or P in bf16
  Tensor dscores, dscores_bf16;  // (G, rows, keys): dP (fp32) and dS in bf16 (backward)
  Tensor inv_sum, lse;           // (G, rows): a block's rows' 1 / sum of exp-scores, log-sum-exp
  Tensor q, dout;              // (G, rows, HS) bf16: a block's queries, output gradient
  Tensor k, v;                 // (G, keys, HS) bf16: the keys and values up to a block's end
  Tensor rows_out;             // (G, rows, HS) fp32: a block's output or dQ
  Tensor dk, dv;               // (G, keys, HS) fp32: a block's share of dK, dV (backward)

  static int64_t most_heads(int64_t B, int64_t T, int64_t NH) {
    int64_t most = 0;
    for (const AttentionGroup& g : block_groups(B, T, NH)) most = std::max(most, g.nb * g.nh);
    return most;
  }
  Scratch(int64_t B, int64_t T, int64_t C, int64_t NH, bool backward) {
    const int64_t G = most_heads(B, T, NH), R = std::min(T, attention_block_rows(T)), HS = C / NH;
    scores = Tensor::empty({G * R * T});
    scores_bf16 = Tensor::empty({G * R * T}, DType::BF16);
    q = Tensor::empty({G * R * HS}, DType::BF16);
    k = Tensor::empty({G * T * HS}, DType::BF16);
    v = Tensor::empty({G * T * HS}, DType::BF16);
    rows_out = Tensor::empty({G * R * HS});
    inv_sum = Tensor::empty({G * R});
    lse = Tensor::empty({G * R});
    if (!backward) return;
    dscores = Tensor::empty({G * R * T});
    dscores_bf16 = Tensor::empty({G * R * T}, DType::BF16);
    dout = Tensor::empty({G * R * HS}, DType::BF16);
    dk = Tensor::empty({G * T * HS});
    dv = Tensor::empty({G * T * HS});
  }
  int64_t bytes() const {
    int64_t sum = 0;
    for (const Tensor* t :
         {&scores, &scores_bf16, &dscores, &dscores_bf16, &q, &dout, &k, &v, &rows_out, &dk, &dv, &inv_sum, &lse})
      sum += t->defined() ? t->nbytes() : 0;
    return sum;
  }
  Buffers part(int64_t p, int64_t parts) const {
    auto f32 = [&](const Tensor& t) { return t.defined() ? t.f32() + t.numel() / parts * p : nullptr; };
    auto bf16 = [&](const Tensor& t) { return t.defined() ? t.bf16() + t.numel() / parts * p : nullptr; };
    return Buffers{.scores = f32(scores), .dscores = f32(dscores), .rows_out = f32(rows_out), .dk = f32(dk),
                   .dv = f32(dv), .inv_sum = f32(inv_sum), .lse = f32(lse), .scores_bf16 = bf16(scores_bf16),
                   .dscores_bf16 = bf16(dscores_bf16), .q = bf16(q), .dout = bf16(dout), .k = bf16(k), .v = bf16(v)};
  }
};

// The scaled scores S = scale Q K^T of rows [i0, i1) of the group against keys [0, i1): the
// block's q and k gathered into s.q and s.k, S into s.scores.
void block_scores(Operand q, Operand k, const View& qkv, const Heads& g, int64_t i0, int64_t i1, float scale,
                  const Buffers& s) {
  const int64_t R = i1 - i0;
  gather(q, qkv, g, i0, i1, s.q);
  gather(k, qkv, g, 0, i1, s.k);
  batched_matmul(g.desc(R, i1, g.HS, g.dense(R, g.HS), g.dense_t(g.HS, i1), scale), s.q, s.k, s.scores);
}

ScoreRows block_rows(int64_t i0, int64_t i1) { return ScoreRows{(i1 - i0) * i1, i1, i0, i1}; }

// Where row i of the group's head h keeps its log-sum-exp in a (B, NH, T) array.
int64_t lse_at(const AttentionGroup& ag, const Heads& g, int64_t NH, int64_t T, int64_t h, int64_t i) {
  return ((ag.b0 + h / g.nh) * NH + ag.h0 + h % g.nh) * T + i;
}

// The block's probabilities exp(S - lse) into att (B, NH, T, T), zeros after the diagonal. Row
// i of the group's head h sits where lse_at puts its log-sum-exp, times T: a thread's share of
// some heads of several sequences is not one contiguous slice of att.
void keep_probabilities(const float* scores, const float* lse, const AttentionGroup& ag, const Heads& g, int64_t NH,
                        int64_t T, int64_t i0, int64_t i1, float* att) {
  const int64_t R = i1 - i0;
  for (int64_t h = 0; h < g.G(); ++h)
    for (int64_t r = 0; r < R; ++r) {
      const float* s = scores + (h * R + r) * i1;
      float* row = att + lse_at(ag, g, NH, T, h, i0 + r) * T;
      for (int64_t j = 0; j <= i0 + r; ++j) row[j] = fast_exp(s[j] - lse[h * R + r]);
      std::memset(row + i0 + r + 1, 0, sizeof(float) * (T - i0 - r - 1));
    }
}

// Group `ag` split into `parts` equal shares of whole sequences or of heads (nb or nh divisible
// by parts), or {} when neither divides.
std::vector<AttentionGroup> split(const AttentionGroup& ag, int64_t parts) {
  std::vector<AttentionGroup> out;
  if (ag.nb % parts == 0)
    for (int64_t p = 0; p < parts; ++p) out.push_back({ag.b0 + p * ag.nb / parts, ag.nb / parts, ag.h0, ag.nh});
  else if (ag.nh % parts == 0)
    for (int64_t p = 0; p < parts; ++p) out.push_back({ag.b0, ag.nb, ag.h0 + p * ag.nh / parts, ag.nh / parts});
  return out;
}

// Every causal block [i0, i1) of every head group, in order: body(group, its heads, its
// offset into the (B, T, 3C) qkv buffers, its offset into the (B, T, C) heads buffers, i0, i1,
// the scratch to use). With several threads the threads split each group's sequences or heads and run their share's blocks alone (each product, softmax and
// copy on one thread): a block's products are small, and splitting each over the threads left
// them waiting on one another at every product's end (1.65x from 1 to 2 threads against the
// linear layers' 2.0x). The shares write disjoint heads, so the results do not depend on it.
// Where the products widen their bf16 operands to fp32 (no native bf16 matmul), each share
// widens its own into scratch of its own, so the shares run the same way.
template <class Body>
void for_each_block(int64_t B, int64_t T, int64_t C, int64_t NH, const Scratch& scratch, Body&& body) {
  const int64_t HS = C / NH, blk = attention_block_rows(T);
  auto blocks = [&](const AttentionGroup& ag, const Buffers& buffers) {
    const Heads g{ag.nb, ag.nh, HS};
    const int64_t qkv_off = ag.b0 * T * 3 * C + ag.h0 * HS, heads_off = ag.b0 * T * C + ag.h0 * HS;
    for (int64_t i0 = 0; i0 < T; i0 += blk) body(ag, g, qkv_off, heads_off, i0, std::min(T, i0 + blk), buffers);
  };
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  for (const AttentionGroup& ag : block_groups(B, T, NH)) {
    const std::vector<AttentionGroup> shares = threads > 1 ? split(ag, threads) : std::vector<AttentionGroup>{};
    if (shares.empty()) {
      blocks(ag, scratch.part(0, 1));
      continue;
    }
    std::exception_ptr error;  // an exception may not leave the parallel region
#pragma omp parallel num_threads(threads)
    {
      // oneDNN runs a product called inside a parallel region on the calling thread only; its
      // primitives are made for one thread here (the matmul cache keys on the thread count).
      omp_set_num_threads(1);
      try {
        // Every share is run even when the region got fewer threads than asked for.
        for (int p = omp_get_thread_num(); p < threads; p += omp_get_num_threads())
          blocks(shares[p], scratch.part(p, threads));
      } catch (...) {
#pragma omp critical(loom_attention_bf16_error)
        if (!error) error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
  }
}

float scale_of(int64_t C, int64_t NH) { return 1.0f / std::sqrt(static_cast<float>(C / NH)); }

}  // namespace

void attention_forward_bf16(float* out, float* att, float* lse, Operand qkv, int64_t B, int64_t T, int64_t C,
                            int64_t NH, const AttentionDropout& dropout) {
  const float scale = scale_of(C, NH);
  const View in{T * 3 * C, 3 * C}, heads{T * C, C};
  const Scratch scratch(B, T, C, NH, /*backward=*/false);
  for_each_block(B, T, C, NH, scratch, [&](const AttentionGroup& ag, const Heads& g, int64_t qkv_off,
                                           int64_t heads_off, int64_t i0, int64_t i1, const Buffers& s) {
    const Operand q = qkv.at(qkv_off), k = q.at(C), v = q.at(2 * C);
    const int64_t R = i1 - i0, HS = g.HS;
    block_scores(q, k, in, g, i0, i1, scale, s);
    causal_exp(s.scores, block_rows(i0, i1), g.G(), i0, i1, s.scores_bf16, s.inv_sum, s.lse);
    if (att != nullptr) keep_probabilities(s.scores, s.lse, ag, g, NH, T, i0, i1, att);
    if (lse != nullptr)
      for (int64_t h = 0; h < g.G(); ++h)
        std::memcpy(lse + lse_at(ag, g, NH, T, h, i0), s.lse + h * R, sizeof(float) * R);
    if (dropout.active()) {  // dropped exp-scores zeroed; the rows' 1 / sum take 1 / (1 - p)
      const AttentionDropout d = dropout.shifted(ag.b0, ag.h0);
      for_each_block_row(g, R, i1, [&](int64_t h, int64_t r) {
        d.zero_dropped(s.scores_bf16 + (h * R + r) * i1, i0 + r + 1, h / g.nh, h % g.nh, i0 + r);
        s.inv_sum[h * R + r] *= d.scale();
      });
    }
    // out[i0:i1] = E V[0:i1] / sum, row by row
    gather(v, in, g, 0, i1, s.v);
    batched_matmul(g.desc(R, HS, i1, g.dense(R, i1), g.dense(i1, HS)), s.scores_bf16, s.v, s.rows_out);
    scatter(s.rows_out, heads, g, i0, i1, out + heads_off, /*added_below=*/i0, s.inv_sum);
  });
}

void attention_backward_bf16(float* dqkv, const float* dout, const float* lse, Operand qkv, int64_t B, int64_t T,
                             int64_t C, int64_t NH, const AttentionDropout& dropout) {
  const float scale = scale_of(C, NH);
  const View in{T * 3 * C, 3 * C}, heads{T * C, C};
  const Scratch scratch(B, T, C, NH, /*backward=*/true);
  for_each_block(B, T, C, NH, scratch, [&](const AttentionGroup& ag, const Heads& g, int64_t qkv_off,
                                           int64_t heads_off, int64_t i0, int64_t i1, const Buffers& s) {
    const Operand q = qkv.at(qkv_off), k = q.at(C), v = q.at(2 * C);
    float* dq = dqkv + qkv_off;
    float* dk = dq + C;
    float* dv = dq + 2 * C;
    const int64_t R = i1 - i0, HS = g.HS;
    // S of the block again (the forward's product on the same operands); the rows' log-sum-exp
    // as forward saved it, or from S here (the same pass on the same scores, bit for bit).
    block_scores(q, k, in, g, i0, i1, scale, s);
    if (lse != nullptr)
      for (int64_t h = 0; h < g.G(); ++h)
        std::memcpy(s.lse + h * R, lse + lse_at(ag, g, NH, T, h, i0), sizeof(float) * R);
    else
      causal_exp(s.scores, block_rows(i0, i1), g.G(), i0, i1, s.scores_bf16, s.inv_sum, s.lse);
    // dP = dO V^T; then P = exp(S - lse) and dS = P (dP - rowsum(P dP)), both in bf16 for the products.
    gather(dout + heads_off, heads, g, i0, i1, s.dout);
    gather(v, in, g, 0, i1, s.v);
    batched_matmul(g.desc(R, i1, HS, g.dense(R, HS), g.dense_t(HS, i1)), s.dout, s.v, s.dscores);
    // Under dropout dP is the dropped probabilities' gradient times the mask, and dV's product
    // reads P dropped: each row's mask drawn once for both, around the row's softmax backward (a
    // draw for each hashed every visible probability three times a step, this twice).
    const AttentionDropout d = dropout.shifted(ag.b0, ag.h0);
    if (d.active())
      for_each_block_row(g, R, i1, [&](int64_t h, int64_t r) {
        const int64_t at = (h * R + r) * i1, i = i0 + r, n = i + 1;
        thread_local std::vector<float> mask;  // this thread's row of the mask
        mask.resize(static_cast<size_t>(n));
        d.row_mask(mask.data(), n, h / g.nh, h % g.nh, i);
        const float* __restrict m = mask.data();
        float* __restrict dp = s.dscores + at;
        const float inflate = d.scale();
        for (int64_t j = 0; j < n; ++j) dp[j] = m[j] != 0.0f ? dp[j] * inflate : 0.0f;
        causal_softmax_backward_from_lse_row(s.scores + at, dp, i, i1, s.lse[h * R + r], s.scores_bf16 + at,
                                             s.dscores_bf16 + at);
        bfloat16* __restrict p = s.scores_bf16 + at;
        for (int64_t j = 0; j < n; ++j) p[j].bits = m[j] != 0.0f ? p[j].bits : uint16_t{0};
      });
    else
      causal_softmax_backward_from_lse(s.scores, s.dscores, block_rows(i0, i1), g.G(), i0, i1, s.lse, s.scores_bf16,
                                       s.dscores_bf16);
    // dQ[i0:i1] = scale dS K[0:i1]
    batched_matmul(g.desc(R, HS, i1, g.dense(R, i1), g.dense(i1, HS), scale), s.dscores_bf16, s.k, s.rows_out);
    scatter(s.rows_out, in, g, i0, i1, dq, /*added_below=*/i0);
    // Keys [0, i1) receive from this block's query rows: dK[0:i1] += scale dS^T Q[i0:i1] and
    // dV[0:i1] += P^T dO[i0:i1]; rows [i0, i1) are first reached here, so written.
    batched_matmul(g.desc(i1, HS, R, g.dense_t(i1, R), g.dense(R, HS), scale), s.dscores_bf16, s.q, s.dk);
    scatter(s.dk, in, g, 0, i1, dk, /*added_below=*/i0);
    // dV reads P dropped as forward's product did: the dropped entries zeroed (above), 1 / (1 - p)
    // its alpha.
    batched_matmul(g.desc(i1, HS, R, g.dense_t(i1, R), g.dense(R, HS), d.active() ? d.scale() : 1.0f), s.scores_bf16,
                   s.dout, s.dv);
    scatter(s.dv, in, g, 0, i1, dv, /*added_below=*/i0);
  });
}

int64_t attention_backward_bf16_bytes(int64_t B, int64_t T, int64_t C, int64_t NH) {
  return Scratch(B, T, C, NH, /*backward=*/true).bytes();
}

}  // namespace loom::kernels
