#include "loom/plan/tensor_parallel_3d_memory.hpp"

#include <algorithm>

#include "loom/plan/mixed_precision_cost.hpp"

namespace loom::plan {

namespace {

enum Linear { kQkv, kAttentionProj, kFc, kMlpProj };

// The split a Linear's input or output takes on this grid: `ways` when the grid splits the
// layer, whole (1) when it stays serial.
int64_t split(const Grid3DActivationShape& s, Linear l, int64_t ways) { return s.split[l] ? ways : 1; }

// What one block keeps, by part: the attention half (ln1 to the core) and the MLP half (the
// projection's input, ln2 to the MLP's projection).
struct BlockParts {
  int64_t attention = 0, mlp = 0;
};

BlockParts block_parts(const Grid3DActivationShape& s) {
  const int64_t v = s.bf16 ? 2 : 4, BTC = s.B * s.T * s.C, BT = s.B * s.T, R = s.row;
  const int64_t norm = v * BTC + 8 * BT;  // a LayerNorm's input (its bf16 copy in bf16) and statistics
  // q, k, v of this row's heads, and their probabilities (fp32) or rows' log-sum-exp (bf16).
  const int64_t core = v * 3 * BTC / R + (s.bf16 ? 4 * s.NH / R * BT : 4 * s.NH / R * BT * s.T);
  BlockParts p;
  p.attention = norm + v * BTC / split(s, kQkv, s.col) + core;
  // The projection's input over row (a serial projection keeps it gathered whole), ln2, fc's
  // input over col, the MLP's pre-activation over row and the projection's input.
  p.mlp = v * BTC / split(s, kAttentionProj, R) + norm + v * BTC / split(s, kFc, s.col) + v * 4 * BTC / R +
          v * 4 * BTC / split(s, kMlpProj, R);
  return p;
}

}  // namespace

int64_t grid_3d_layer_activation_bytes(const Grid3DActivationShape& s) {
  const BlockParts p = block_parts(s);
  return p.attention + p.mlp;
}

int64_t grid_3d_activation_bytes(const Grid3DActivationShape& s) {
  const int64_t v = s.bf16 ? 2 : 4, BTC = s.B * s.T * s.C, BT = s.B * s.T, R = s.row, Co = s.col;
  const BlockParts last = block_parts(s);
  const int64_t layer = last.attention + last.mlp;
  const int64_t logits = 4 * BT * s.V;  // fp32, turned into their gradient in place, kept to the end of backward
  // Every block's activations, or under recompute each block's input and the one block replayed
  // in backward (its input released once the replay is done).
  const int64_t input = v * BTC;
  const int64_t blocks = s.recompute ? s.L * input : s.L * layer;
  const int64_t replayed = s.recompute ? (s.L - 1) * input + layer : blocks;
  const int64_t dy = 4 * BTC;  // the gradient entering the last block, held through its backward

  // The head's backward: the final LayerNorm's input and output (bf16 copies in bf16) and
  // statistics, its input gradient, in bf16 the logits' gradient converted a piece of rows at a time.
  const int64_t head_rows = s.bf16 ? 2 * std::min(BT, kBf16HeadGradientRows) * s.V : 0;
  const int64_t head = blocks + logits + 2 * v * BTC + 8 * BT + 4 * BTC + head_rows;

  // The last block's MLP projection backward: dy (sliced over col when the layer gathers its
  // output, and in bf16 converted), and its input gradient over row (whole when serial).
  const int64_t dy_slice = s.split[kMlpProj] && Co > 1 ? 4 * BTC / Co : 0;
  const int64_t dy_bf16 = s.bf16 ? 2 * BTC / split(s, kMlpProj, Co) : 0;
  const int64_t mlp_backward = replayed + logits + dy + dy_slice + dy_bf16 + 4 * 4 * BTC / split(s, kMlpProj, R);

  // Its attention backward, the MLP half released: dy, the residual's gradient, the heads'
  // gradient, q, k and v's, and the scores' gradient (fp32) or a group of heads' recomputed
  // probabilities (bf16).
  const int64_t scores = s.bf16 ? bf16_attention_backward_bytes(s.B, s.T, s.C, s.NH, R) : 4 * s.NH / R * BT * s.T;
  const int64_t attention_backward = replayed - last.mlp + logits + 2 * dy + 4 * BTC / R + 4 * 3 * BTC / R + scores;

  // The forward of the last block's MLP projection, the block's other tensors alive: in bf16
  // the residual stream (ln2 keeps a bf16 copy) and fc's fp32 output; ln2's output where fc keeps
  // a copy or a slice, not the tensor itself; the projection's output over col, gathered whole.
  // A serial projection gathers its input whole in fp32 (GELU's output, which the MLP still
  // holds, widened in bf16) and keeps that, or its bf16 copy; its output is whole.
  const int64_t ln2_output = s.bf16 || (s.split[kFc] && Co > 1) ? 4 * BTC : 0;
  const int64_t projection =
      s.split[kMlpProj] ? 4 * BTC / Co + (Co > 1 ? 4 * BTC : 0)
                        : 4 * BTC + (s.bf16 ? 2 * 4 * BTC / R + 4 * 4 * BTC : (R > 1 ? 4 * 4 * BTC / R : 0));
  const int64_t mlp_forward_live = (s.bf16 ? 4 * BTC + 4 * 4 * BTC / R : 0) + ln2_output + projection;
  // Under recompute the replay runs with every block's input held, the logits and dy: on the
  // block's input widened to fp32 in bf16; in fp32 ln1 keeps that input itself (counted once).
  const int64_t mlp_forward =
      s.recompute ? s.L * input + logits + dy + (s.bf16 ? 4 * BTC : -4 * BTC) + layer + mlp_forward_live
                  : blocks + mlp_forward_live;
  return std::max({head, mlp_backward, attention_backward, mlp_forward});
}

}  // namespace loom::plan
