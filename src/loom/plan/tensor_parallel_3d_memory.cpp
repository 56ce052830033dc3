#include "loom/plan/tensor_parallel_3d_memory.hpp"

#include <algorithm>

#include "loom/parallel/context_parallel/head_groups.hpp"
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
  const int64_t BTCs = BTC / s.seq;  // a LayerNorm's or the residual stream's tensor, its tokens split over seq
  const int64_t norm = v * BTCs + 8 * BT / s.seq;  // a LayerNorm's input (its bf16 copy in bf16) and statistics
  // q, k, v of this row's heads, and their probabilities (fp32) or rows' log-sum-exp (bf16, and
  // ring attention's); ring attention's output is the projection's input.
  const int64_t lse = 4 * s.NH / R * BT;
  const int64_t core = v * 3 * BTC / R + (s.bf16 || s.ring > 1 ? lse : s.selective ? 0 : lse * s.T);
  BlockParts p;
  p.attention = norm + v * BTCs / split(s, kQkv, s.col) + core;
  // The projection's input over row (a serial projection keeps it gathered whole), ln2 and the MLP.
  p.mlp = v * BTC / split(s, kAttentionProj, R) + norm + grid_3d_mlp_activation_bytes(s);
  return p;
}

}  // namespace

int64_t grid_3d_mlp_activation_bytes(const Grid3DActivationShape& s) {
  const int64_t v = s.bf16 ? 2 : 4, BTC = s.B * s.T * s.C, BTCs = BTC / s.seq, R = s.row;
  return v * BTCs / split(s, kFc, s.col) + v * 4 * BTC / R + v * 4 * BTC / split(s, kMlpProj, R);
}

// Ring attention's backward beside q, k and v's gradient: its output, which it keeps (the
// projection's input: released by the projection's backward but held here to the end); in bf16
// q, k, v and the output widened; each row's output-gradient dot product; a group of heads'
// scores and their gradient for a pair of chunks; five (B, T, 2C) K/V buffers (those held,
// those arriving, and dK/dV's own, arriving and outgoing sums).
int64_t ring_attention_backward_bytes(const Grid3DActivationShape& s) {
  const int64_t BTC = s.B * s.T * s.C / s.row, C = s.C / s.row, NH = s.NH / s.row, Tc = s.T / 2;
  const int64_t output = (s.bf16 ? 2 : 4) * BTC, widened = s.bf16 ? 4 * 3 * BTC + 4 * BTC : 0;
  return output + widened + 4 * NH * s.B * s.T + 2 * 4 * s.B * parallel::cp::heads_per_group(Tc, C, NH) * Tc * Tc +
         5 * 4 * 2 * BTC;
}

int64_t grid_3d_layer_activation_bytes(const Grid3DActivationShape& s) {
  const BlockParts p = block_parts(s);
  return p.attention + p.mlp;
}

ChunkActivationPeaks grid_3d_chunk_activation_peaks(const Grid3DActivationShape& s) {
  const int64_t v = s.bf16 ? 2 : 4, BTC = s.B * s.T * s.C, BT = s.B * s.T, R = s.row, Co = s.col;
  const int64_t BTCs = BTC / s.seq, BTs = BT / s.seq;  // the residual stream's tensors on this rank
  const bool sp = s.seq > 1;
  const BlockParts last = block_parts(s);
  const int64_t layer = last.attention + last.mlp;
  // fp32, turned into their gradient in place, kept to the end of backward (a chunk with the head).
  const int64_t logits = s.head ? 4 * BT * s.V : 0;
  // Every block's activations, or under recompute each block's input and the one block replayed
  // in backward (its input released once the replay is done).
  const int64_t input = v * BTCs;
  const int64_t blocks = s.recompute ? s.L * input : s.L * layer;
  const int64_t replayed = s.recompute ? (s.L - 1) * input + layer : blocks;
  // The gradient entering the last block, held through its backward (a pipeline chunk without
  // the head: the received one, held through the chunk's backward).
  const int64_t dy = 4 * BTCs;
  // Under hidden dropout the branch being differentiated gets a masked copy of its gradient.
  const int64_t dropped = s.dropout ? 4 * BTCs : 0;

  // The head's backward: the final LayerNorm's input and output (bf16 copies in bf16) and
  // statistics, its input gradient, in bf16 the logits' gradient converted a piece of rows at a time.
  // Under sequence parallelism the input gradient is summed whole before its reduce-scatter, and
  // the weight gradient reads the input gathered whole.
  const int64_t head_rows = s.bf16 ? 2 * std::min(BT, kBf16HeadGradientRows) * s.V : 0;
  const int64_t head_dx = sp ? 4 * BTC + v * BTC + 4 * BTCs : 4 * BTC;
  const int64_t final_norm = s.head ? 2 * v * BTCs + 8 * BTs : 0;
  const int64_t head = s.head ? blocks + logits + final_norm + head_dx + head_rows : 0;

  // The last block's MLP projection backward: dy (sliced over col when the layer gathers its
  // output, and in bf16 converted), and its input gradient over row (whole when serial).
  // Under sequence parallelism the weight gradient reads dy gathered whole.
  const int64_t dy_slice = s.split[kMlpProj] && Co > 1 ? 4 * BTC / Co : 0;
  const int64_t dy_bf16 = s.bf16 ? 2 * BTCs / split(s, kMlpProj, Co) : 0;
  const int64_t dy_whole = sp ? v * BTC : 0;
  const int64_t mlp_backward =
      replayed + logits + dy + dropped + dy_slice + dy_bf16 + dy_whole + 4 * 4 * BTC / split(s, kMlpProj, R);

  // Under sequence parallelism fc's backward comes after it, the projection's input and the
  // pre-activation released: the pre-activation's gradient (and in bf16 its copy), the input
  // gradient summed whole and its reduce-scattered chunk, the input gathered whole for dW.
  const int64_t fc_backward = sp ? replayed - 2 * v * 4 * BTC / R + logits + dy + dropped + 4 * 4 * BTC / R +
                                       (s.bf16 ? 2 * 4 * BTC / R : 0) + 4 * BTC + 4 * BTCs + v * BTC
                                 : 0;

  // Its attention backward, the MLP half released: dy, the residual's gradient, the heads'
  // gradient, q, k and v's, and the scores' gradient (fp32) or a group of heads' recomputed
  // probabilities (bf16; under selective recompute in fp32 with their gradient).
  const int64_t scores = s.ring > 1    ? ring_attention_backward_bytes(s)
                         : s.bf16      ? bf16_attention_backward_bytes(s.B, s.T, s.C, s.NH, R)
                         : s.selective ? 2 * 4 * attention_group_values(s.B, s.T, s.NH / R)
                                       : 4 * s.NH / R * BT * s.T;
  const int64_t attention_backward =
      replayed - last.mlp + logits + 2 * dy + dropped + 4 * BTC / R + 4 * 3 * BTC / R + scores;

  // The forward of the last block's MLP projection, the block's other tensors alive: in bf16
  // the residual stream (ln2 keeps a bf16 copy) and fc's fp32 output; ln2's output where fc keeps
  // a copy or a slice, not the tensor itself; the projection's output over col, gathered whole.
  // A serial projection gathers its input whole in fp32 (GELU's output, which the MLP still
  // holds, widened in bf16) and keeps that, or its bf16 copy; its output is whole.
  const int64_t ln2_output = s.bf16 || (s.split[kFc] && Co > 1) ? 4 * BTCs : 0;
  const int64_t projection =
      s.split[kMlpProj] ? 4 * BTCs / Co + (Co > 1 ? 4 * BTC : 0)
                        : 4 * BTC + (s.bf16 ? 2 * 4 * BTC / R + 4 * 4 * BTC : (R > 1 ? 4 * 4 * BTC / R : 0));
  const int64_t mlp_forward_live = (s.bf16 ? 4 * BTCs + 4 * 4 * BTC / R : 0) + ln2_output + projection;
  // Under recompute the replay runs with every block's input held, the logits and dy: on the
  // block's input widened to fp32 in bf16; in fp32 ln1 keeps that input itself (counted once).
  // Without recompute the block's input is alive too, in bf16 beside ln1's copy of it.
  const int64_t run_forward = s.L * input + (s.bf16 ? 4 * BTCs : -4 * BTCs) + layer + mlp_forward_live;
  const int64_t mlp_forward = s.recompute ? run_forward + logits + dy : blocks + (s.bf16 ? 4 * BTCs : 0) + mlp_forward_live;
  // A chunk without the embedding runs on the received input, which its forward holds to the
  // end: ln1 keeps that tensor itself in fp32 without recompute, a copy of it in bf16.
  const int64_t received = !s.embedding && s.bf16 && s.L > 1 ? 4 * BTCs : 0;
  // A chunk without the head holds the received gradient through its whole backward, so the
  // block before the last runs its moments with that gradient beside its own incoming one, and
  // the last block's tensors freed (under recompute only its kept input: in bf16 the larger).
  const int64_t earlier = !s.head && s.L > 1 ? std::max<int64_t>(0, dy - (s.recompute ? input : layer)) : 0;
  // Attention dropout's fp32 forward adds a dropped copy of one causal block of a head group's
  // probabilities; that moment's tensors are all held again in the attention backward with
  // the probabilities' gradient, which is larger, so it is never the peak and is not a moment here.
  ChunkActivationPeaks p;
  p.kept = blocks + logits + final_norm;
  p.forward = (s.recompute ? run_forward : mlp_forward) + received;
  p.backward = std::max({head, earlier + std::max({mlp_backward, fc_backward, attention_backward,
                                                   s.recompute ? mlp_forward : 0})});
  return p;
}

int64_t grid_3d_activation_bytes(const Grid3DActivationShape& s) {
  const ChunkActivationPeaks p = grid_3d_chunk_activation_peaks(s);
  return std::max(p.forward, p.backward);
}

}  // namespace loom::plan
