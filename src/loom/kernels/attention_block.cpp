// Block attention with an online softmax (kernels/attention_block.hpp). The scores of a block
// are one batched GEMM into a (B, NH, Tq, Tk) scratch; a row pass turns them into exp-scores
// against the running max (rescaling what was accumulated before when the max grows); a
// second GEMM adds exp-scores x V. Backward recomputes the probabilities from the saved
// log-sum-exp, as FlashAttention does, so no block keeps a (T, T) matrix between passes.
#include "loom/kernels/attention_block.hpp"

#include <cmath>
#include <limits>

#include "loom/kernels/fast_math.hpp"
#include "loom/kernels/matmul.hpp"

namespace loom::kernels {

namespace {

using Strides = std::array<int64_t, 4>;

// (B, NH, rows, HS) and its transpose (B, NH, HS, rows) for a heads view.
template <class T>
Strides rows_of(const HeadsOf<T>& v, int64_t HS) {
  return {v.batch, HS, v.row, 1};
}
template <class T>
Strides cols_of(const HeadsOf<T>& v, int64_t HS) {
  return {v.batch, HS, 1, v.row};
}

BatchedMatmul product(const AttentionBlock& s, int64_t M, int64_t N, int64_t K, const Strides& a, const Strides& b,
                      const Strides& c, float alpha, bool accumulate) {
  return BatchedMatmul{.batch0 = s.B, .batch1 = s.NH, .M = M, .N = N, .K = K, .a_strides = a,
                       .b_strides = b, .c_strides = c, .alpha = alpha, .accumulate = accumulate};
}

// The (B, NH, Tq, Tk) scratch and its transpose.
Strides scores_rows(const AttentionBlock& s) { return {s.NH * s.Tq * s.Tk, s.Tq * s.Tk, s.Tk, 1}; }
Strides scores_cols(const AttentionBlock& s) { return {s.NH * s.Tq * s.Tk, s.Tq * s.Tk, 1, s.Tk}; }

float scale_of(const AttentionBlock& s) { return 1.0f / std::sqrt(static_cast<float>(s.HS)); }
// Keys visible to query row i of the block.
int64_t visible(const AttentionBlock& s, int64_t i) { return s.diagonal ? i + 1 : s.Tk; }

template <class T>
T& at(const RowsOf<T>& r, int64_t b, int64_t h, int64_t i) {
  return r.data[b * r.batch + h * r.head + i];
}

}  // namespace

void attention_block_start(const AttentionBlock& s, HeadsOut acc, RowsOf<float> row_max, RowsOf<float> row_sum) {
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t i = 0; i < s.Tq; ++i) std::fill_n(acc.data + b * acc.batch + i * acc.row, s.NH * s.HS, 0.0f);
    for (int64_t h = 0; h < s.NH; ++h)
      for (int64_t i = 0; i < s.Tq; ++i) {
        at(row_max, b, h, i) = -std::numeric_limits<float>::infinity();
        at(row_sum, b, h, i) = 0.0f;
      }
  }
}

void attention_block_forward(const AttentionBlock& s, HeadsView q, HeadsView k, HeadsView v, HeadsOut acc,
                             RowsOf<float> row_max, RowsOf<float> row_sum, float* scores,
                             const AttentionDropout& dropout) {
  const int64_t HS = s.HS;
  batched_matmul(product(s, s.Tq, s.Tk, HS, rows_of(q, HS), cols_of(k, HS), scores_rows(s), scale_of(s), false),
                 q.data, k.data, scores);
#pragma omp parallel for schedule(static) if (s.B * s.NH * s.Tq * s.Tk >= (1 << 15))
  for (int64_t r = 0; r < s.B * s.NH * s.Tq; ++r) {
    const int64_t b = r / (s.NH * s.Tq), h = r / s.Tq % s.NH, i = r % s.Tq;
    float* __restrict row = scores + r * s.Tk;
    const int64_t n = visible(s, i);
    float block_max = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) block_max = std::max(block_max, row[j]);
    float& m = at(row_max, b, h, i);
    const float m_new = std::max(m, block_max);
    // exp(-inf - finite) is 0: the first block rescales nothing.
    const float rescale = fast_exp(m - m_new);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; ++j) {
      row[j] = fast_exp(row[j] - m_new);
      sum += row[j];
    }
    for (int64_t j = n; j < s.Tk; ++j) row[j] = 0.0f;
    at(row_sum, b, h, i) = at(row_sum, b, h, i) * rescale + sum;
    if (dropout.active()) dropout.apply(row, n, b, h, i, dropout.scale());
    m = m_new;
    float* out = acc.data + b * acc.batch + i * acc.row + h * HS;
    for (int64_t d = 0; d < HS; ++d) out[d] *= rescale;
  }
  batched_matmul(product(s, s.Tq, HS, s.Tk, scores_rows(s), rows_of(v, HS), rows_of(acc, HS), 1.0f, true), scores,
                 v.data, acc.data);
}

void attention_block_finish(const AttentionBlock& s, HeadsOut acc, RowsOf<float> row_max, RowsOf<const float> row_sum) {
#pragma omp parallel for schedule(static) if (s.B * s.NH * s.Tq * s.HS >= (1 << 15))
  for (int64_t r = 0; r < s.B * s.NH * s.Tq; ++r) {
    const int64_t b = r / (s.NH * s.Tq), h = r / s.Tq % s.NH, i = r % s.Tq;
    const float l = at(row_sum, b, h, i);
    float* out = acc.data + b * acc.batch + i * acc.row + h * s.HS;
    const float inv = 1.0f / l;
    for (int64_t d = 0; d < s.HS; ++d) out[d] *= inv;
    float& m = at(row_max, b, h, i);
    m += std::log(l);
  }
}

void attention_row_delta(const AttentionBlock& s, HeadsView out, HeadsView dout, RowsOf<float> delta) {
#pragma omp parallel for schedule(static) if (s.B * s.NH * s.Tq * s.HS >= (1 << 15))
  for (int64_t r = 0; r < s.B * s.NH * s.Tq; ++r) {
    const int64_t b = r / (s.NH * s.Tq), h = r / s.Tq % s.NH, i = r % s.Tq;
    const float* o = out.data + b * out.batch + i * out.row + h * s.HS;
    const float* g = dout.data + b * dout.batch + i * dout.row + h * s.HS;
    float sum = 0.0f;
    for (int64_t d = 0; d < s.HS; ++d) sum += o[d] * g[d];
    at(delta, b, h, i) = sum;
  }
}

void attention_block_backward(const AttentionBlock& s, HeadsView q, HeadsView k, HeadsView v, HeadsView dout,
                              RowsOf<const float> lse, RowsOf<const float> delta, HeadsOut dq, HeadsOut dk,
                              HeadsOut dv, float* scores, float* dscores, const AttentionDropout& dropout) {
  const int64_t HS = s.HS;
  const float scale = scale_of(s);
  batched_matmul(product(s, s.Tq, s.Tk, HS, rows_of(q, HS), cols_of(k, HS), scores_rows(s), scale, false), q.data,
                 k.data, scores);
  batched_matmul(product(s, s.Tq, s.Tk, HS, rows_of(dout, HS), cols_of(v, HS), scores_rows(s), 1.0f, false),
                 dout.data, v.data, dscores);
#pragma omp parallel for schedule(static) if (s.B * s.NH * s.Tq * s.Tk >= (1 << 15))
  for (int64_t r = 0; r < s.B * s.NH * s.Tq; ++r) {
    const int64_t b = r / (s.NH * s.Tq), h = r / s.Tq % s.NH, i = r % s.Tq;
    float* __restrict p = scores + r * s.Tk;
    float* __restrict ds = dscores + r * s.Tk;
    const int64_t n = visible(s, i);
    const float row_lse = at(lse, b, h, i), row_delta = at(delta, b, h, i);
    if (dropout.active()) {
      // One draw of each mask m serves dP (times m) and dV's probabilities (times m).
      const AttentionDropout::RowDraws draws = dropout.row(b, h, i);
      const float kept = dropout.scale();
      for (int64_t j = 0; j < n; ++j) {
        const float m = draws.keeps(j) ? kept : 0.0f;
        const float pj = fast_exp(p[j] - row_lse);
        ds[j] = pj * (ds[j] * m - row_delta);
        p[j] = pj * m;
      }
    } else {
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) {
        p[j] = fast_exp(p[j] - row_lse);
        ds[j] = p[j] * (ds[j] - row_delta);
      }
    }
    for (int64_t j = n; j < s.Tk; ++j) p[j] = ds[j] = 0.0f;
  }
  batched_matmul(product(s, s.Tk, HS, s.Tq, scores_cols(s), rows_of(dout, HS), rows_of(dv, HS), 1.0f, true), scores,
                 dout.data, dv.data);
  batched_matmul(product(s, s.Tq, HS, s.Tk, scores_rows(s), rows_of(k, HS), rows_of(dq, HS), scale, true), dscores,
                 k.data, dq.data);
  batched_matmul(product(s, s.Tk, HS, s.Tq, scores_cols(s), rows_of(q, HS), rows_of(dk, HS), scale, true), dscores,
                 q.data, dk.data);
}

}  // namespace loom::kernels
