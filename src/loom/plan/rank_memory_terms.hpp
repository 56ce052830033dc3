// What one pipeline rank of a GPT holds, counted once for the trainer's memory check
// (train/memory_budget.cpp, before any model tensor exists) and for the planner
// (layout_cost.cpp), so that the two cannot drift: the parameters of the chunks the rank owns,
// as the GPT builds them under 1D tensor parallelism, and the activations its schedule holds at
// once plus what one layer at a time adds, in Loom's precisions (fp32, bf16). Plain numbers in:
// the planner's model spec and the trainer's config each say what they are.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "loom/nn/gpt.hpp"
#include "loom/parallel/pipeline/held_activations.hpp"
#include "loom/parallel/pipeline/schedule.hpp"
#include "loom/plan/memory_model.hpp"

namespace loom::plan {

struct RankShape {
  int64_t batch = 1;   // B: sequences of a micro-batch
  int64_t seq = 1;     // tokens of a whole sequence (context parallelism gives a rank seq / cp)
  int64_t hidden = 0;  // C
  int64_t heads = 1;
  int64_t vocab = 0;   // the token table's rows, padded (split over tp)
  int64_t tp = 1, cp = 1, ep = 1;
  bool sequence_parallel = false;  // over tp > 1
  bool bf16 = false;               // --precision bf16; else fp32
  bool recompute = false;          // every block re-run in backward from its kept input
  bool selective = false;          // attention's probabilities recomputed in backward (fp32 without cp keeps none)
  bool hidden_dropout = false;     // a masked copy of each branch's incoming gradient in backward
  int64_t experts = 0, top_k = 0, every = 1;  // E experts in every `every`-th block's MLP; 0: none
  double capacity_factor = 0.0;                // f: under ep the rows a rank's experts take are bounded by it; 0: dropless
  bool skewed_routing = false;  // dropless under ep: every row the rank can be sent, not the balanced share (expert_rows)
  // 3D tensor parallelism (tp = 1): the grid's axes that split activations (depth splits the
  // batch and the weights) and which of a block's Linears it splits (Layers3D::splits).
  int64_t grid_row = 1, grid_col = 1;
  std::array<bool, 4> grid_splits{true, true, true, true};
  // The ranks of a grid's plane a mixture of experts shares its experts out over
  // (parallel::tp3d::Layers3D::expert_split): each holds E / (ep x expert_split) of them.
  int64_t expert_split = 1;

  int64_t tokens() const { return seq / cp; }  // of each sequence, on this rank
  // The mixtures of experts among stage s's blocks (block b when b + 1 is a multiple of `every`).
  int64_t moe_blocks(const nn::GPTStage& s) const;
};

// One block's Linear weights and biases on a rank: attention's (qkv, proj) and a dense MLP's (fc, proj).
struct BlockLinears {
  int64_t attention_weights = 0, attention_biases = 0, mlp_weights = 0, mlp_biases = 0;
};
// Under 1D tensor parallelism tp: the weights split, qkv's and fc's biases with their columns,
// the row-parallel projections' biases replicated (each rank adds the whole bias once).
BlockLinears tensor_parallel_linears(int64_t hidden, int64_t tp);

// The parameters one rank holds, as the state formulas tell them apart.
struct RankParameters {
  int64_t dense = 0;           // every parameter but the experts
  int64_t linear_weights = 0;  // of dense: the blocks' Linear weights, which only GEMMs read
  int64_t kept = 0;            // of dense: the routers' weights, kept in fp32
  int64_t gemm_free = 0;       // of dense: what no GEMM reads (no bf16 copy under DDP)
  int64_t experts = 0;         // E / ep experts of each of its MoE blocks (all E without ep)
  int64_t expert_weights = 0;  // of experts: their weights, which their GEMMs read
};

// Over the chunks a rank owns, each block with `linears` and two LayerNorms (replicated over tp),
// an MoE block's MLP a router (no bias, replicated) and E / ep experts (replicated over tp); the
// token table (over tp) on the first stage and the LM head's copy on the last, the position
// table on the first and the final LayerNorm on the last, both replicated.
RankParameters rank_parameters(const RankShape& shape, const std::vector<nn::GPTStage>& chunks,
                               const BlockLinears& linears);

// The model state of a rank's parameters, ZeRO stage `zero` over `shards` ranks, an optimizer of
// optimizer_bytes a parameter: plan::model_state_bytes in fp32, the mixed-precision formulas
// (mixed_precision_cost.hpp) in bf16. Without ep ZeRO 1-3 shard the experts with the rest
// (one ShardedDataParallel over every parameter); under ep, or DDP, a rank keeps its experts
// whole (ExpertDataParallel), with a bf16 copy of their weights in bf16.
StateBytes rank_state_bytes(const RankParameters& params, const RankShape& shape, int64_t shards, int zero,
                            int64_t optimizer_bytes);

// The activations one block keeps for backward per micro-batch, without recompute
// (activation_bytes_per_layer, bf16_activation_bytes_per_layer).
int64_t block_activation_bytes(const RankShape& shape);
// What a mixture of experts' block keeps beyond it (moe_extra_activation_bytes_per_layer); 0 without experts.
int64_t moe_extra_activation_bytes(const RankShape& shape);

// A rank's activation bytes, term by term.
struct ActivationTerms {
  int64_t block = 0;      // a block, per micro-batch: its layer's, or under recompute its input alone
  int64_t moe_block = 0;  // an MoE block beyond that (its routed rows); 0 under recompute
  int64_t head = 0;       // the head's chunk: the fp32 logits, the final LayerNorm's input, output and statistics
  int64_t rerun = 0, moe_rerun = 0;  // recompute's block re-run in backward, and its mixture's extra
  int64_t attention = 0;  // one layer's attention scratch: ring attention's, or bf16's recomputed probabilities
  int64_t scratch = 0;    // the three fp32 (B, T, C) gradients a chunk's first backward passes on
  int64_t moe_scratch = 0;    // with an MoE block last in a chunk, its backward's working set
  int64_t head_gradient = 0;  // the head's backward: the logits' gradient rows in bf16
};
ActivationTerms activation_terms(const RankShape& shape);

// The most a rank holds at once: each (micro-batch, chunk) pair its schedule holds keeps its
// chunk's blocks, mixtures of experts and head (parallel::pipeline::peak_held_bytes over
// `actions`, the rank's list; every chunk once when null: no pipeline), then recompute's re-run
// block, and the larger of the head's backward and a chunk's first backward (attention scratch
// and the gradients passed on), which come one after the other.
int64_t rank_activation_bytes(const RankShape& shape, const ActivationTerms& terms,
                              const std::vector<nn::GPTStage>& chunks,
                              const std::vector<parallel::pipeline::Action>* actions);
// The same in Loom's precisions, moment by moment: each chunk a grid rank's count of its blocks
// (tensor_parallel_3d_memory.hpp: the 1 x 1 grid, or row = tp, with or without the embedding and
// the head; a mixture of experts' routed rows and re-run added as terms, its backward a moment
// of its own),
// walked over pipeline rank `rank`'s list of `schedule` (every chunk once when null: no
// pipeline) with what the other (micro-batch, chunk) pairs keep and the tensors in transit
// between stages (parallel::pipeline::peak_running_bytes; each sent one held to the action
// `reaped` names: parallel::pipeline::sends_reaped's list for this rank, which a caller walking
// every rank works out once for the schedule). The sum held the last block's MLP tensors through its attention
// backward (bf16 tiny GPT: 82176 B summed, 74496 measured and counted; tp 2 with sequence
// parallelism at width 48: 102144 for 87936), missed ring attention's backward scratch (cp 2
// bf16 at width 48: 71808 for 105600), the tensors in transit (pp 2 fp32 with recompute: 214016
// for 230400 on the first stage) and, under recompute, a mixture's backward scratch (0.78 of the
// peak).
int64_t loom_rank_activation_bytes(const RankShape& shape, const std::vector<nn::GPTStage>& chunks,
                                   const std::vector<parallel::pipeline::Action>* actions,
                                   const std::vector<size_t>* reaped);

}  // namespace loom::plan
