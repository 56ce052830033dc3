// The planner's cost model: per-device memory and time per step of one layout (dp x pp x tp x cp,
// micro-batch size, virtual pipeline chunks, ZeRO stage, full or selective recompute, sequence
// parallelism) for a model on a cluster, and the search over layouts (`loom plan`). Mixed
// precision with Adam as in the seeds and Narayanan et al. 2021 (2-byte weights, gradients and
// activations, fp32 master weights and moments), or Loom's own fp32 on a CPU; the time terms are
// step_time.hpp's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/parallel/pipeline/schedule.hpp"
#include "loom/plan/specs.hpp"
#include "loom/plan/rank_memory_terms.hpp"
#include "loom/plan/step_time.hpp"

namespace loom::plan {

struct LayoutCost {
  Layout layout;
  bool valid = false;
  std::string why_not;  // when not valid: "<kind>: <details>", kind one of heads, layers,
                        // batch, interleaving, sequence, out of memory
  int64_t micro_batches = 0;  // per pipeline per step
  // Bytes per device.
  int64_t state_bytes = 0;       // parameters, gradients, optimizer state (of the pipeline rank needing the most)
  int64_t expert_state_bytes = 0;  // a mixture of experts' share of state_bytes (its experts')
  int64_t activation_bytes = 0;  // of the pipeline rank needing the most (state + activations), as state_bytes
  int64_t memory_bytes() const { return state_bytes + activation_bytes; }
  StepTime time;
  double step_s() const { return time.total(); }
  double flops_per_device = 0;  // per second, counting recompute as the papers do
};

// What plan/rank_memory_terms.hpp counts a rank of this layout from (a 3D grid's row and col
// included).
RankShape rank_shape(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout);
// The model state of a device holding `r`, ZeRO-sharded over dp: in Loom's precisions as the
// memory check counts it; in mixed precision the published 2-byte weights and gradients and
// 12 bytes of fp32 master weights and moments, ZeRO sharding the 12, then the gradients, then
// the weights over dp. Experts: without ep ZeRO shards them with the rest, under ep (or without
// ZeRO) a device keeps its E / ep whole.
int64_t device_state_bytes(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                           const RankParameters& r);

// Bytes of the activations one layer keeps per micro-batch. Mixed precision: Korthikanti et
// al. 2022 in 2-byte values, sbh(34 + 5as/h) serially; with tensor parallelism
// sbh(10 + 24/t + 5as/(ht)); with sequence parallelism as well, sbh(34 + 5as/h)/t. Fp32 and
// bf16: Loom's own layer as the memory check counts it (rank_memory_terms.hpp, matched by its
// memory tracker). With full recompute only the layer's input, s b h values (split t ways
// with sequence parallelism; 4 bytes in fp32, 2 otherwise). Context parallelism keeps s / cp
// tokens and ring attention no probabilities (the 5as/h term), nor does selective recompute.
double layer_activation_bytes(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout, bool recompute);

// The model state (parameters, gradients, optimizer state) of the pipeline rank holding the
// most: the parameters of the stages it owns as the trainer builds them (rank_memory_terms.hpp:
// LayerNorms, the row-parallel biases and the position table replicated over tp), ZeRO-sharded
// over dp, with its experts: sharded with the rest without ep (experts_sharded_by_zero), whole
// under ep (unsharded_state_bytes, with their bf16 copy in bf16). In bf16 the blocks' Linear
// weights have no fp32 value under ZeRO-1/2 and the routers no bf16 copy
// (mixed_precision_cost.hpp). Without ZeRO's gathered units (zero_gathered_bytes_of_rank).
int64_t model_state_bytes_per_device(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout);

// Mixed precision's model state of `params` parameters, as the literature counts it: 2-byte
// weights and gradients and 12 bytes of fp32 master weights and moments, ZeRO stage `zero`
// sharding the 12, then the gradients, then the weights over `shards` ranks.
int64_t published_mixed_state_bytes(int64_t params, int64_t shards, int zero);

// What ZeRO holds whole at once beyond the shards in a step of `micro_batches` on one pipeline
// rank of `shape` over its `chunks`, each block with `linears` (a 3D grid rank's blocks too),
// through its part of the schedule (`actions`; null without a pipeline), which predict adds to
// that rank's state: the memory check's count (plan/zero_gathered.hpp: stage 3's gathered units,
// stages 2-3's full gradients of the units in backward and in their reduce-scatter), in bf16 and
// mixed precision with bf16 gathers. 0 below ZeRO-2 or at dp 1.
int64_t zero_gathered_bytes_of_rank(RankShape shape, const std::vector<nn::GPTStage>& chunks, const BlockLinears& linears,
                                    const ClusterSpec& cluster, const Layout& layout, int64_t micro_batches,
                                    const std::vector<parallel::pipeline::Action>* actions);

// Memory and time of one layout for a global batch of sequences.
LayoutCost predict(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout, int64_t global_batch);

// Which layouts the search enumerates besides dp x pp x tp.
struct SearchSpace {
  std::vector<int64_t> micro_batches = {1, 2, 4, 8};
  std::vector<int64_t> chunks = {1, 2};
  std::vector<bool> recompute = {false, true};
  // Selective recompute, where it changes anything (selective_recompute_matters).
  std::vector<bool> selective_recompute = {false, true};
  int zero = 1;                   // ZeRO stage of every layout with dp > 1
  bool zero3_reshard_per_step = false;  // ZeRO-3 keeps gathered units for the step (Layout's)
  int64_t bucket_bytes = int64_t{25} << 20;  // DDP's gradient buckets (zero 0)
  bool sequence_parallel = true;  // with every tp > 1
  bool tensor_parallel_3d = false;  // also every dp x row x col x depth grid (pp 1)
  // Context parallelism (powers of two dividing the devices and 2 cp the sequence) is tried
  // for sequences of at least this many tokens: shorter ones gain too little attention
  // memory to pay for the ring.
  int64_t cp_from_seq = 4096;
};

// Whether the search prices `layout` with selective recompute: where it changes anything
// (selective_recompute_matters), and beside full recompute only when the space holds selective
// recompute alone (searching both, they are Megatron-LM's two granularities: full recompute
// keeps no probabilities but its re-run layer's).
bool searches_selective_recompute(const Layout& layout, Precision precision, const SearchSpace& space);

// The cp degrees the search tries: 1, and for a long sequence the powers of two that divide
// the devices and let 2 cp divide the sequence.
std::vector<int64_t> context_parallel_degrees(const ModelSpec& model, int64_t devices, const SearchSpace& space);

// Every layout of `devices` devices (dp x pp x tp = devices, tp dividing the devices of a
// node (a group never straddles two) and the heads, pp dividing the layers, micro-batch sizes dividing the per-replica batch,
// interleaving, full and selective recompute), valid first by predicted step time, then the invalid ones with
// their reason.
std::vector<LayoutCost> search(const ModelSpec& model, const ClusterSpec& cluster, int64_t devices,
                               int64_t global_batch, const SearchSpace& space = {});

}  // namespace loom::plan
