// Bad input is bounded before it allocates: a model's memory, predicted per rank with the
// planner's own count (plan/rank_memory_terms.hpp, the numbers `loom train --dry-run` prints), is
// checked against what this machine has available before any model tensor exists. The
// prediction counts the model state and the activations a rank keeps for backward: one
// micro-batch's, or under a pipeline those of every micro-batch its schedule holds at once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "loom/nn/gpt.hpp"
#include "loom/parallel/pipeline/held_activations.hpp"
#include "loom/plan/memory_model.hpp"
#include "loom/plan/tensor_parallel_3d_memory.hpp"
#include "loom/train/config.hpp"

namespace loom::train {

struct MemoryNeed {
  double state = 0;        // bytes: parameters, gradients and optimizer state (sampling: parameters)
  double activations = 0;  // bytes: what this rank's blocks (and logits) keep, for the micro-batches held at once
  double kv_cache = 0;     // bytes: generation's cached keys and values (kv_cache_bytes)
  double data = 0;         // bytes: input data the model holds whole (a GCN's graph: features, Â, per-node arrays)
  double gathered = 0;     // bytes: ZeRO's units held whole at once in a step (plan/zero_gathered.hpp)
  // bytes: with checkpoint_async, at most the checkpoint file this rank holds encoded while the
  // next steps run (checkpoint_staging_bytes)
  double checkpoint = 0;
  int64_t pp_rank = -1;    // the pipeline rank whose need this is (-1: no pipeline)
  double total() const { return state + activations + kv_cache + data + gathered + checkpoint; }
};

// Per rank, to train config under its layout, ZeRO stage and optimizer: the pipeline rank
// needing the most (its pp_rank set under a pipeline). Under ZeRO-2/3 with what its units hold
// whole at once beyond the shards (gathered).
MemoryNeed training_memory(const TrainConfig& config);
// A dropless mixture of experts under ep (moe_capacity_factor 0, or at least E / K): the count
// holds a rank's expert rows at the balanced share, which a skewed router exceeds; this is
// training_memory with every row a rank can be sent held instead (plan::expert_rows, skewed:
// min(E, ep K) / K times the share). nullopt otherwise (no experts, ep 1, or a capacity that
// bounds them).
std::optional<MemoryNeed> skewed_routing_memory(const TrainConfig& config);
// Pipeline rank pp_rank's: the state of the stages it owns (rank_training_state) and the
// activations of its chunks (its blocks, their mixtures of experts, the logits on the last
// stage) for each (micro-batch, chunk) its schedule holds at once (the same action list the
// executor runs: 1F1B pp - r micro-batches on rank r, GPipe all of them, interleaved Megatron's
// warm-up), plus the running action's own peak moment (plan::loom_rank_activation_bytes) and the
// tensors in transit between stages, those sent held as late as the rank can tell their
// receivers may post (`receivers`: Late, the check's; OnTime, the least a pipeline in step
// holds). Under --tp-3d a grid rank's blocks are counted as the grid splits them
// (plan/tensor_parallel_3d_memory.hpp), every grid rank of a pipeline rank the same.
MemoryNeed rank_training_memory(const TrainConfig& config, int64_t pp_rank,
                                parallel::pipeline::Receivers receivers = parallel::pipeline::Receivers::Late);
// The model state (parameters, gradients, optimizer) of a rank of pipeline rank pp_rank in
// config's layout, in the run's precision (plan::model_state_bytes in fp32, the mixed-precision
// formulas of plan/mixed_precision_cost.hpp in bf16): its tensor-parallel share of the
// parameters of the blocks and tables its stages own (the partition the trainer builds), and
// of its MoE blocks' experts; under --tp-3d a grid rank's shard of each Linear3D and whole what
// the grid does not split (parallel::tp3d::Layers3D::share). pp_rank -1: the pipeline rank
// holding the most state.
plan::StateBytes rank_training_state(const TrainConfig& config, int64_t pp_rank = -1);
// With checkpoint_async and checkpoint_every: at most what pipeline rank pp_rank's ranks hold
// encoded while a checkpoint is written behind training, the fp32 values and optimizer state of
// its parameters (a ZeRO shard's, or all its stage's on a data-parallel replica that owns
// them); under a single-file checkpoint of several ranks, on rank 0 the whole model's. 0 without.
int64_t checkpoint_staging_bytes(const TrainConfig& config, int64_t pp_rank);
// The parameters one rank holds of the whole model (no pipeline split): its tensor-parallel
// share, or under --tp-3d a grid rank's (the same on every grid rank).
int64_t rank_model_parameters(const TrainConfig& config);
// The activations one transformer layer keeps for backward per micro-batch on this rank, in
// the run's precision (plan::activation_bytes_per_layer, plan::bf16_activation_bytes_per_layer).
int64_t layer_activation_bytes(const TrainConfig& config);
// Under --tp-3d: the shape whose activations a grid rank of the whole model holds
// (plan/tensor_parallel_3d_memory.hpp), every grid rank the same; which of a block's Linears the
// grid splits (Layers3D::splits).
plan::Grid3DActivationShape grid_3d_activation_shape(const TrainConfig& config);
// What a mixture of experts' block keeps beyond that (plan::moe_extra_activation_bytes_per_layer).
int64_t moe_extra_layer_activation_bytes(const TrainConfig& config);
// To generate `batch` sequences together from model: the parameters (and their bf16 copies
// when bf16, and the decode step's packed copies past kernels::kGemvMaxRows sequences), one
// sequence's activations and logits, and the KV cache.
MemoryNeed inference_memory(const nn::GPTConfig& model, int64_t batch = 1, bool bf16 = false);
// To score `batch` windows of block_size tokens in one forward pass (loom eval): the
// parameters (and their bf16 copies when bf16), and every layer's activations and the logits
// of the whole batch, which the forward's context keeps until the loss is taken. No KV cache.
MemoryNeed scoring_memory(const nn::GPTConfig& model, int64_t batch, bool bf16 = false);
// The KV cache of `batch` sequences of block_size tokens: n_layer x 2 (keys, values) x batch
// x block_size x n_embd values (KVCache's allocation), fp32, or bf16 in a bf16 run.
double kv_cache_bytes(const nn::GPTConfig& model, int64_t batch, bool bf16 = false);

struct AvailableMemory {
  int64_t bytes = 0;
  std::string source;  // where the number comes from, for messages
};
// MemAvailable of /proc/meminfo (else free pages x page size), capped by a cgroup's limit.
AvailableMemory available_memory();

// "12.0 GiB (state 11.9 GiB + activations 96.0 MiB)", "... (state 11.9 GiB + gathered units 1.0 GiB + ...)"
std::string describe(const MemoryNeed& need);

// Who checks, for the refusal's wording: the command whose prediction the need is ("loom train
// --dry-run" prints training's; empty: the need is no command's prediction, a checkpoint's
// bytes), the flag setting how many sequences it runs together (empty: none: generating with
// a KV cache, its sequences; without, the windows scored at once) and what the user can change
// (empty: only the memory: a checkpoint's model is what it is).
struct MemoryCheckBy {
  std::string command{};
  std::string batch_flag{};
  std::string remedy{};
};
// Training's remedy: a run's model and layout are the user's to choose.
inline constexpr const char* kTrainingMemoryRemedy =
    "make the model smaller (n_layer, n_embd, block_size, batch_size) or shard it over more ranks";

// loom::Error naming what, the need and the memory available when ranks_on_host x need
// exceeds it.
void check_fits_in_memory(const MemoryNeed& need, int ranks_on_host, const std::string& what, const MemoryCheckBy& by);

}  // namespace loom::train
