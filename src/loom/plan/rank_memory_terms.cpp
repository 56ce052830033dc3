#include "loom/plan/rank_memory_terms.hpp"

#include <algorithm>

#include "loom/error.hpp"
#include "loom/parallel/pipeline/held_activations.hpp"
#include "loom/plan/mixed_precision_cost.hpp"
#include "loom/plan/moe_cost.hpp"
#include "loom/plan/tensor_parallel_3d_memory.hpp"

namespace loom::plan {

int64_t RankShape::moe_blocks(const nn::GPTStage& s) const {
  return experts > 0 ? s.end_block / every - s.first_block / every : 0;
}

BlockLinears tensor_parallel_linears(int64_t C, int64_t t) {
  return {.attention_weights = 4 * C * C / t, .attention_biases = 3 * C / t + C,
          .mlp_weights = 8 * C * C / t, .mlp_biases = 4 * C / t + C};
}

RankParameters rank_parameters(const RankShape& shape, const std::vector<nn::GPTStage>& chunks,
                               const BlockLinears& linears) {
  const int64_t C = shape.hidden, table = shape.vocab / shape.tp * C;
  const int64_t local_experts = shape.experts > 0 ? shape.experts / (shape.ep * shape.expert_split) : 0;
  RankParameters r;
  for (const nn::GPTStage& s : chunks) {
    const int64_t blocks = s.end_block - s.first_block, moe = shape.moe_blocks(s);
    r.linear_weights += blocks * linears.attention_weights + (blocks - moe) * linears.mlp_weights;
    r.gemm_free += blocks * (linears.attention_biases + 4 * C) + (blocks - moe) * linears.mlp_biases;
    r.kept += moe * shape.experts * C;
    r.experts += moe * local_experts * expert_mlp_parameters(C);
    r.expert_weights += moe * local_experts * 8 * C * C;
    // The token table: the LM head's GEMMs read it; a first stage without the head only looks
    // rows up. The position table and the final LayerNorm no GEMM reads.
    if (s.head) r.dense += table;
    if (s.embedding) r.gemm_free += shape.seq * C + (s.head ? 0 : table);
    if (s.head) r.gemm_free += 2 * C;
  }
  r.dense += r.linear_weights + r.kept + r.gemm_free;
  return r;
}

namespace {
// The state of `params` parameters ZeRO shards (or DDP replicates), of which gemm_only only GEMMs
// read, kept stay fp32 and gemm_free no GEMM reads.
StateBytes sharded_state(const RankShape& shape, int64_t params, int64_t gemm_only, int64_t kept, int64_t gemm_free,
                         int64_t shards, int zero, int64_t optimizer_bytes) {
  const int n = static_cast<int>(shards);
  if (!shape.bf16) return model_state_bytes(params, n, zero, optimizer_bytes);
  return mixed_precision_state_bytes(params, params - gemm_only - kept, n, zero, optimizer_bytes, kept, gemm_free);
}
}  // namespace

StateBytes rank_state_bytes(const RankParameters& r, const RankShape& shape, int64_t shards, int zero,
                            int64_t optimizer_bytes) {
  if (r.experts > 0 && shape.ep == 1 && zero >= 1)
    return sharded_state(shape, r.dense + r.experts, r.linear_weights, r.kept, r.gemm_free + r.experts - r.expert_weights,
                         shards, zero, optimizer_bytes);
  const StateBytes dense = sharded_state(shape, r.dense, r.linear_weights, r.kept, r.gemm_free, shards, zero, optimizer_bytes);
  const StateBytes experts = unsharded_state_bytes(r.experts, shape.bf16 ? r.expert_weights : 0, optimizer_bytes);
  return {dense.params + experts.params, dense.grads + experts.grads, dense.optimizer + experts.optimizer};
}

int64_t block_activation_bytes(const RankShape& s) {
  return s.bf16 ? bf16_activation_bytes_per_layer(s.batch, s.seq, s.hidden, s.heads, s.tp, s.sequence_parallel, s.cp)
                : activation_bytes_per_layer(s.batch, s.seq, s.hidden, s.heads, s.tp, s.sequence_parallel, s.cp, s.selective);
}

namespace {
// The grid a chunk of blocks of shape s is, for tensor_parallel_3d_memory.hpp: a 3D grid's rank,
// or a column of tp rows under tensor parallelism (the vocabulary split over them), the residual
// stream split over tp under sequence parallelism, this rank's tokens and ring attention under
// context parallelism; with or without the embedding and the head.
Grid3DActivationShape grid_shape(const RankShape& s, const nn::GPTStage& chunk) {
  return {.B = s.batch, .T = s.tokens(), .C = s.hidden, .NH = s.heads, .L = chunk.end_block - chunk.first_block,
          .V = s.vocab / s.tp, .row = s.tp * s.grid_row, .col = s.grid_col, .seq = s.sequence_parallel ? s.tp : 1,
          .ring = s.cp, .bf16 = s.bf16, .recompute = s.recompute, .selective = s.selective, .dropout = s.hidden_dropout,
          .embedding = chunk.embedding, .head = chunk.head, .split = s.grid_splits};
}
}  // namespace

int64_t moe_extra_activation_bytes(const RankShape& s) {
  if (s.experts == 0) return 0;
  if (s.grid_row * s.grid_col == 1)
    return moe_extra_activation_bytes_per_layer(s.batch, s.seq, s.hidden, s.tp, s.sequence_parallel, s.cp, s.experts,
                                                s.top_k, s.bf16, s.ep, s.capacity_factor, s.skewed_routing);
  // On a grid's plane every rank routes every token of its rows: the MoE layer's tensors (its
  // experts' rows this rank's share) in place of the grid's MLP's.
  return moe_activation_bytes_per_layer(s.batch, s.seq, s.hidden, 1, false, s.cp, s.experts, s.top_k, s.bf16, s.ep,
                                        s.capacity_factor, s.skewed_routing, s.expert_split) -
         grid_3d_mlp_activation_bytes(grid_shape(s, nn::GPTStage{0, 1, false, false}));
}

ActivationTerms activation_terms(const RankShape& s) {
  const int64_t B = s.batch, T = s.tokens(), C = s.hidden, w = s.bf16 ? 2 : 4;
  const int64_t Tr = s.sequence_parallel ? T / s.tp : T;  // this rank's tokens outside the split layers
  const int64_t Vt = s.vocab / s.tp;
  const int64_t layer = block_activation_bytes(s), moe_extra = moe_extra_activation_bytes(s);
  ActivationTerms a;
  // With recompute a block keeps only its input (in bf16 under mixed precision, this rank's
  // chunk of the sequence under sequence parallelism); one block's activations exist at a time.
  a.block = s.recompute ? w * B * Tr * C : layer;
  a.moe_block = s.recompute ? 0 : moe_extra;
  a.rerun = s.recompute ? layer : 0;
  a.moe_rerun = s.recompute ? moe_extra : 0;
  // The head's stage keeps the logits in fp32 (the loss turns them into their gradient in place,
  // kept to the head's backward), the final LayerNorm's input and output (bf16 copies in bf16)
  // and its statistics.
  a.head = 4 * B * T * Vt + 2 * w * B * T * C + 8 * B * T;
  // Ring attention's scratch while one layer runs (the sum of terms only: Loom's count is the
  // grid's moment by moment, loom_rank_activation_bytes): the grid's ring backward less its kept
  // output, which the block holds already, and less the last block's MLP half (LayerNorm, fc's
  // input, pre-activation, projection's input: 11 (B, T, C / tp) values and the statistics),
  // freed by the time it runs. Only the scores, all heads at once, was 51-73% of the measured
  // peak of a dense pp 2 x cp 2 in bf16; this was 83-96%.
  // Under bf16 without cp, the probabilities attention's backward recomputes for a group of heads.
  if (s.cp > 1)
    a.attention = ring_attention_backward_bytes({.B = B, .T = T, .C = C, .NH = s.heads, .row = s.tp, .ring = s.cp,
                                                 .bf16 = s.bf16}) -
                  w * B * T * C / s.tp - (w * 11 * B * T * C / s.tp + 8 * B * T);
  else if (s.bf16) a.attention = bf16_attention_backward_bytes(B, s.seq, C, s.heads, s.tp);
  // Under selective recompute in fp32, the probabilities and their gradient for a group of heads.
  else if (s.selective) a.attention = 2 * 4 * attention_group_values(B, s.seq, s.heads / s.tp);
  // A chunk's backward starts at its last block with all of the chunk's activations held: the
  // fp32 gradients it passes on (the residual stream's, its branch's, its LayerNorm's), and when
  // that block is a mixture of experts its backward's working set (its rows' hidden gradient in
  // fp32, in bf16 too: counted at 2 bytes it left a bf16 top-2 run 2-5% under its peak).
  a.scratch = 3 * 4 * B * Tr * C;
  if (s.experts > 0)
    a.moe_scratch = moe_backward_working_bytes(B, s.seq, C, s.tp, s.sequence_parallel, s.cp, s.ep, s.top_k, s.bf16,
                                               s.experts, s.capacity_factor, s.skewed_routing, s.expert_split);
  // In bf16 the head's backward converts the logits' gradient to bf16, kBf16HeadGradientRows
  // rows of this rank's tokens at a time (nn::GPT::kHeadGradientRows).
  if (s.bf16) a.head_gradient = 2 * std::min(B * T, kBf16HeadGradientRows) * Vt;
  return a;
}

int64_t rank_activation_bytes(const RankShape& s, const ActivationTerms& a, const std::vector<nn::GPTStage>& chunks,
                              const std::vector<parallel::pipeline::Action>* actions) {
  std::vector<int64_t> chunk_bytes;
  bool moe_here = false, moe_last = false, head = false;
  for (const nn::GPTStage& chunk : chunks) {
    const int64_t blocks = chunk.end_block - chunk.first_block, moe = s.moe_blocks(chunk);
    moe_here = moe_here || moe > 0;
    moe_last = moe_last || (s.experts > 0 && chunk.end_block % s.every == 0);
    head = head || chunk.head;
    chunk_bytes.push_back(a.block * blocks + a.moe_block * moe + (chunk.head ? a.head : 0));
  }
  int64_t held = 0;
  if (actions) held = parallel::pipeline::peak_held_bytes(*actions, chunk_bytes);
  else for (const int64_t bytes : chunk_bytes) held += bytes;
  held += a.rerun + (moe_here ? a.moe_rerun : 0);
  // The head's backward (its gradient rows) runs before the blocks' and is done by then.
  const int64_t first_backward = a.attention + a.scratch + (moe_last ? a.moe_scratch : 0);
  return held + std::max(head ? a.head_gradient : 0, first_backward);
}

namespace {

// Every chunk once, forward in order and backward in reverse: a rank without a pipeline, or
// with one whose schedule the executor refuses.
std::vector<parallel::pipeline::Action> one_micro_batch(size_t chunks) {
  std::vector<parallel::pipeline::Action> actions;
  for (size_t c = 0; c < chunks; ++c) actions.push_back({parallel::pipeline::ActionKind::Forward, 0, static_cast<int>(c)});
  for (size_t c = chunks; c-- > 0;) actions.push_back({parallel::pipeline::ActionKind::Backward, 0, static_cast<int>(c)});
  return actions;
}

}  // namespace

int64_t loom_rank_activation_bytes(const RankShape& s, const std::vector<nn::GPTStage>& chunks,
                                   const std::vector<parallel::pipeline::Action>* actions,
                                   const std::vector<size_t>* reaped) {
  const ActivationTerms a = activation_terms(s);
  // Each chunk is a grid rank's model of its blocks (tensor_parallel_3d_memory.hpp): a 3D grid's
  // rank, or a column of tp rows under tensor parallelism (the vocabulary split over them), the residual stream split
  // over tp under sequence parallelism, this rank's tokens and ring attention under context
  // parallelism; with or without the embedding and the head. Its count takes a run's peak
  // moment by moment (by the time the last block's attention backward runs, its MLP's tensors
  // are freed); the schedule's walk adds what the other (micro-batch, chunk) pairs keep and the
  // tensors in transit between stages.
  std::vector<parallel::pipeline::ChunkRun> runs;
  const int64_t rows = s.batch * s.tokens() / (s.sequence_parallel ? s.tp : 1);  // of the residual stream here
  for (const nn::GPTStage& chunk : chunks) {
    const Grid3DActivationShape grid = grid_shape(s, chunk);
    const ChunkActivationPeaks p = grid_3d_chunk_activation_peaks(grid);
    // A mixture of experts keeps its routed rows beside the dense block's tensors (none under
    // recompute) and re-runs them in backward under recompute. Its backward is a moment of its
    // own: when it ends the chunk (under recompute wherever it is), what the chunk keeps but the
    // final LayerNorm's tensors (their backward is done), under recompute the block re-run in
    // place of its input and without the inputs of the blocks after it (done by then: a chunk
    // without the head then holds its received gradient beside the one it is given), the fp32
    // gradient it is given and its working set. Added to the dense block's moments instead, its
    // working set (which grows with K) was 0.95-1.20 of the tracker's peak.
    const bool moe_here = s.moe_blocks(chunk) > 0, moe_last = moe_here && chunk.end_block % s.every == 0;
    const int64_t moe = s.moe_blocks(chunk) * a.moe_block;
    const int64_t after = s.recompute && moe_here ? chunk.end_block % s.every : 0;  // blocks after its last MoE block
    const int64_t final_norm = chunk.head ? 2 * (s.bf16 ? 2 : 4) * rows * s.hidden + 8 * rows : 0;
    const int64_t replayed = p.kept - (1 + after) * a.block + grid_3d_layer_activation_bytes(grid) + a.moe_rerun;
    const int64_t held = (s.recompute ? replayed : p.kept + moe) - final_norm;
    // The gradient it is given (and under hidden dropout its masked copy).
    const int64_t given = 4 * rows * s.hidden * ((after > 0 && !chunk.head ? 2 : 1) + (s.hidden_dropout ? 1 : 0));
    const int64_t moe_backward = moe_last || (s.recompute && moe_here) ? held + given + a.moe_scratch : 0;
    const int64_t dense_backward = p.backward + moe + (moe_here ? a.moe_rerun : 0);
    runs.push_back({p.kept + moe, p.forward + moe, std::max(dense_backward, moe_backward)});
  }
  if (!actions) {
    const std::vector<parallel::pipeline::Action> once = one_micro_batch(chunks.size());
    return parallel::pipeline::peak_running_bytes(once, runs, 0, std::vector<size_t>(once.size(), once.size()));
  }
  // The stages pass (B, T, C) in fp32 (this rank's tokens; under sequence parallelism its part of them).
  const int64_t transfer = 4 * rows * s.hidden;
  check(reaped != nullptr && reaped->size() == actions->size(), "a pipeline rank's activations need its sends' reaping");
  return parallel::pipeline::peak_running_bytes(*actions, runs, transfer, *reaped);
}

}  // namespace loom::plan
