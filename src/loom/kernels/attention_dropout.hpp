// Dropout on attention's probabilities (Megatron-LM's attention_dropout, nanoGPT's attn_dropout):
// out = (P * mask) V with mask 0 or 1 / (1 - p), while training. The mask of a probability is
// drawn (dropout_hash.hpp) from where it stands in the step's whole batch: its sequence's row,
// its head among the model's, its query's and key's positions in the sequence. So a rank
// holding some of the sequences, some of the heads (tensor parallelism) or some of the
// positions (context parallelism's chunks) drops exactly what the serial run drops there,
// and backward draws the same mask again instead of keeping it.
#pragma once

#include <cstdint>

#include "loom/kernels/dropout_hash.hpp"
#include "loom/tensor/dtype.hpp"

namespace loom::kernels {

struct AttentionDropout {
  float p = 0.0f;           // 0: no dropout
  uint64_t key = 0;         // dropout_key(seed, step, site)
  int64_t first_row = 0;    // the step's batch row of local sequence 0
  int64_t heads = 1;        // the model's heads
  int64_t first_head = 0;   // the model-wide index of local head 0
  int64_t positions = 1;    // the training sequence length: every position is below it
  int64_t query0 = 0, key0 = 0;  // the positions of local query row 0 and key row 0

  bool active() const { return p > 0.0f; }
  float scale() const { return 1.0f / (1.0f - p); }
  // The same draws seen from local sequence b0, head h0, query row i0 and key row j0 on.
  AttentionDropout shifted(int64_t b0, int64_t h0, int64_t i0 = 0, int64_t j0 = 0) const {
    AttentionDropout d = *this;
    d.first_row += b0;
    d.first_head += h0;
    d.query0 += i0;
    d.key0 += j0;
    return d;
  }
  // The index of local (b, h, i, key row 0) among the batch's draws; key row j adds j.
  uint64_t row_index(int64_t b, int64_t h, int64_t i) const {
    return static_cast<uint64_t>((((first_row + b) * heads + first_head + h) * positions + query0 + i) * positions + key0);
  }
  // Row (b, h, i)'s draws, set up once for the row: keeps(j) for its key row j.
  struct RowDraws {
    uint64_t key, base, threshold;
    bool keeps(int64_t j) const { return dropout_keeps(key, base + static_cast<uint64_t>(j), threshold); }
  };
  RowDraws row(int64_t b, int64_t h, int64_t i) const { return {key, row_index(b, h, i), dropout_threshold(p)}; }
  // Row (b, h, i)'s first n probabilities: kept ones times `kept`, dropped ones 0.
  void apply(float* values, int64_t n, int64_t b, int64_t h, int64_t i, float kept) const {
    const RowDraws r = row(b, h, i);
    for (int64_t j = 0; j < n; ++j) values[j] = r.keeps(j) ? values[j] * kept : 0.0f;
  }
  // Row (b, h, i)'s mask over its first n probabilities into `keeps`: 1 kept, 0 dropped (one
  // draw serving two uses of the row).
  void row_mask(float* keeps, int64_t n, int64_t b, int64_t h, int64_t i) const {
    const RowDraws r = row(b, h, i);
    for (int64_t j = 0; j < n; ++j) keeps[j] = r.keeps(j) ? 1.0f : 0.0f;
  }
  // The same on bf16 values, dropped ones zeroed and kept ones left as they are (the caller
  // folds 1 / (1 - p) into the product reading them, so nothing is rounded twice).
  void zero_dropped(bfloat16* values, int64_t n, int64_t b, int64_t h, int64_t i) const {
    const RowDraws r = row(b, h, i);
    // Every element rewritten (a select, not a conditional store), so the loop vectorises.
    for (int64_t j = 0; j < n; ++j) values[j].bits = r.keeps(j) ? values[j].bits : uint16_t{0};
  }
};

}  // namespace loom::kernels
