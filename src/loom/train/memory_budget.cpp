#include "loom/train/memory_budget.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "loom/error.hpp"
#include "loom/kernels/gemv.hpp"
#include "loom/nn/routing.hpp"
#include "loom/parallel/pipeline/partition.hpp"
#include "loom/parallel/pipeline/schedule_file.hpp"
#include "loom/parallel/tensor_parallel_3d/layers_3d.hpp"
#include "loom/plan/memory_model.hpp"
#include "loom/plan/rank_memory_terms.hpp"
#include "loom/plan/tensor_parallel_3d_memory.hpp"
#include "loom/plan/zero_gathered.hpp"
#include "loom/tensor/memory_tracker.hpp"

namespace loom::train {

namespace {

// The exact formulas count in int64; a model past this many bytes (1 EiB) is refused on a
// count in doubles, which cannot overflow.
constexpr double kExactLimit = 0x1p60;

double rough_parameters(const nn::GPTConfig& m) {
  const double C = static_cast<double>(m.n_embd);
  return static_cast<double>(m.n_layer) * 12.0 * C * C +
         static_cast<double>(m.resolved_padded_vocab() + m.block_size) * C;
}

// Activations of one sequence of T tokens through every layer, and its logits, in doubles.
double rough_activations(const nn::GPTConfig& m, double B) {
  const double C = static_cast<double>(m.n_embd), T = static_cast<double>(m.block_size);
  return 4.0 * B * T *
         (static_cast<double>(m.n_layer) * (16.0 * C + static_cast<double>(m.n_head) * T) +
          static_cast<double>(m.resolved_padded_vocab()));
}

std::string format(double bytes) {
  return bytes >= kExactLimit ? "more than 1 EiB" : format_bytes(static_cast<int64_t>(bytes));
}

// A number from a text file: the first integer after key ("MemAvailable:"), or -1.
int64_t read_number(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string word;
  while (in >> word)
    if (key.empty() || word == key) {
      int64_t n = -1;
      if (key.empty()) std::istringstream(word) >> n;
      else in >> n;
      return n;
    }
  return -1;
}

// The virtual stages in model order: the whole model without a pipeline, else the partition the
// trainer builds (GptSpec::build: chunk k of pipeline rank r is virtual stage k pp + r).
std::vector<nn::GPTStage> virtual_stages(const TrainConfig& c) {
  if (c.pp == 1) return {nn::GPTStage{0, c.model.n_layer, true, true}};
  return parallel::pipeline::partition_stages(c.model, c.pp, c.chunks, c.pipeline_layers());
}

// The shape of pipeline rank's work that plan/rank_memory_terms.hpp counts, from config;
// `skewed`: a dropless mixture's rows as a router sending a rank every row it can would give it.
plan::RankShape rank_shape(const TrainConfig& c, bool skewed = false) {
  using parallel::tp3d::Layers3D;
  const nn::GPTConfig& m = c.model;
  const int64_t C = m.n_embd;
  const std::array<int64_t, 3> g = c.tp_3d_grid();  // {1, 1, 1} without a grid
  return {.batch = c.batch_size, .seq = m.block_size, .hidden = C, .heads = m.n_head,
          .vocab = m.resolved_padded_vocab(), .tp = c.tp, .cp = c.cp, .ep = c.ep,
          .sequence_parallel = c.sequence_parallel, .bf16 = c.precision == "bf16", .recompute = m.recompute,
          .selective = m.selective_recompute, .hidden_dropout = m.hidden_dropout > 0.0, .experts = m.moe.enabled() ? m.moe.experts : 0,
          .top_k = m.moe.top_k, .every = m.moe.every, .capacity_factor = m.moe.capacity_factor,
          .skewed_routing = skewed, .grid_row = g[0], .grid_col = g[1],
          .grid_splits = {Layers3D::splits(C, 3 * C, 3, true, g), Layers3D::splits(C, C, 1, false, g),
                          Layers3D::splits(C, 4 * C, 1, true, g), Layers3D::splits(4 * C, C, 1, false, g)},
          .expert_split = m.moe.enabled() && c.tp_3d_on() ? Layers3D::expert_split(m.moe.experts, g) : 1};
}

// The chunks pipeline rank r owns: virtual stages r, r + pp, ...
std::vector<nn::GPTStage> rank_chunks(const TrainConfig& c, const std::vector<nn::GPTStage>& stages, int64_t r) {
  std::vector<nn::GPTStage> chunks;
  for (size_t k = static_cast<size_t>(r); k < stages.size(); k += static_cast<size_t>(c.pp)) chunks.push_back(stages[k]);
  return chunks;
}

// A block's four Linears on a 3D grid: attention's qkv (3 blocks) and proj, the MLP's fc and
// proj, each pair's first a column-parallel request and its second a row-parallel one. A grid
// rank holds its shard of each and whole what the grid cannot split (Layers3D::share).
plan::BlockLinears linear_3d_block(int64_t C, const std::array<int64_t, 3>& grid) {
  using parallel::tp3d::Layers3D;
  const Layers3D::Share qkv = Layers3D::share(C, 3 * C, 3, true, grid), proj = Layers3D::share(C, C, 1, false, grid);
  const Layers3D::Share fc = Layers3D::share(C, 4 * C, 1, true, grid), out = Layers3D::share(4 * C, C, 1, false, grid);
  return {.attention_weights = qkv.weight + proj.weight, .attention_biases = qkv.bias + proj.bias,
          .mlp_weights = fc.weight + out.weight, .mlp_biases = fc.bias + out.bias};
}

// A block's Linears on a rank: split over 1D tensor parallelism, or a 3D grid's share.
plan::BlockLinears block_linears(const TrainConfig& c) {
  return c.tp_3d_on() ? linear_3d_block(c.model.n_embd, c.tp_3d_grid()) : plan::tensor_parallel_linears(c.model.n_embd, c.tp);
}

// The parameters pipeline rank r holds over the stages it owns.
plan::RankParameters rank_parameters(const TrainConfig& c, const std::vector<nn::GPTStage>& stages, int64_t r) {
  return plan::rank_parameters(rank_shape(c), rank_chunks(c, stages, r), block_linears(c));
}

// In the run's precision and optimizer, ZeRO over the shard group (under --tp-3d each grid
// rank's shard of the model, sharded again over the shard group).
plan::StateBytes rank_state(const TrainConfig& c, const plan::RankParameters& r) {
  return plan::rank_state_bytes(r, rank_shape(c), c.shard_size(), static_cast<int>(c.zero),
                                c.optimizer == "adamw" ? 8 : 4);
}

}  // namespace

int64_t rank_model_parameters(const TrainConfig& c) {
  if (!c.tp_3d_on()) return c.model.num_parameters(c.tp);
  const plan::RankParameters r = plan::rank_parameters(rank_shape(c), {nn::GPTStage{0, c.model.n_layer, true, true}},
                                                      block_linears(c));
  return r.dense + r.experts;
}

int64_t checkpoint_staging_bytes(const TrainConfig& c, int64_t pp_rank) {
  if (!c.checkpoint_async || c.checkpoint_every <= 0) return 0;
  TrainConfig fp32 = c;  // a checkpoint holds the fp32 masters, whatever the compute precision
  fp32.precision = "fp32";
  const int64_t optimizer_bytes = c.optimizer == "adamw" ? 8 : 4;
  const bool single_file = c.checkpoint_format == "single" || (c.checkpoint_format == "auto" && c.world_ranks() == 1);
  if (single_file && c.world_ranks() > 1)  // rank 0 encodes the whole gathered model
    return c.model.num_parameters(1) * (4 + optimizer_bytes);
  const plan::StateBytes s = rank_state(fp32, rank_parameters(fp32, virtual_stages(fp32), pp_rank));
  return s.params + s.optimizer;
}

plan::StateBytes rank_training_state(const TrainConfig& c, int64_t pp_rank) {
  const std::vector<nn::GPTStage> stages = virtual_stages(c);
  if (pp_rank >= 0) return rank_state(c, rank_parameters(c, stages, pp_rank));
  plan::StateBytes most;  // the pipeline rank holding the most
  for (int64_t r = 0; r < c.pp; ++r) {
    const plan::StateBytes here = rank_state(c, rank_parameters(c, stages, r));
    if (r == 0 || here.total() > most.total()) most = here;
  }
  return most;
}

namespace {

// The schedule the trainer runs (parallelize's checked_schedule), or none without a pipeline or
// past the executor's MPI tags (2 p v m of them), which refuses such a run when it is built.
std::optional<parallel::pipeline::Schedule> run_schedule(const TrainConfig& c) {
  const double tags = 2.0 * static_cast<double>(c.pp) * static_cast<double>(c.chunks) * static_cast<double>(c.micro_batches);
  if (c.pp == 1 || tags >= 32767.0) return std::nullopt;
  return parallel::pipeline::checked_schedule(c.schedule, c.schedule_file, static_cast<int>(c.pp),
                                              static_cast<int>(c.micro_batches), static_cast<int>(c.chunks));
}

// What ZeRO holds whole at once on pipeline rank r beyond its shards (plan/zero_gathered.hpp),
// through its part of the schedule.
int64_t zero_gathered(const TrainConfig& c, const std::vector<nn::GPTStage>& stages,
                      const std::optional<parallel::pipeline::Schedule>& schedule, int64_t r) {
  return plan::zero_gathered_bytes(plan::zero_modules(rank_shape(c), rank_chunks(c, stages, r), block_linears(c)),
                                   c.shard_size(), static_cast<int>(c.zero), c.micro_batches,
                                   schedule ? &schedule->ranks.at(static_cast<size_t>(r)) : nullptr,
                                   c.zero3_reshard != "step");
}

// State and activations of pipeline rank r: the activations its chunks keep for each
// (micro-batch, chunk) its schedule holds at once, and what one layer at a time adds; ZeRO's
// gathered units.
// Every rank's sends' reaping, worked out once for the schedule; none without one.
std::vector<std::vector<size_t>> reaped_of(const std::optional<parallel::pipeline::Schedule>& schedule,
                                           parallel::pipeline::Receivers receivers) {
  return schedule ? parallel::pipeline::sends_reaped(*schedule, receivers) : std::vector<std::vector<size_t>>{};
}

// `reaped`: reaped_of the schedule; `skewed`: as rank_shape's.
MemoryNeed rank_memory(const TrainConfig& c, const std::vector<nn::GPTStage>& stages,
                       const std::optional<parallel::pipeline::Schedule>& schedule,
                       const std::vector<std::vector<size_t>>& reaped, int64_t r, bool skewed = false) {
  // Without a schedule to walk (no pipeline, or one the executor refuses): one micro-batch.
  const int64_t activations =
      plan::loom_rank_activation_bytes(rank_shape(c, skewed), rank_chunks(c, stages, r),
                                       schedule ? &schedule->ranks.at(static_cast<size_t>(r)) : nullptr,
                                       schedule ? &reaped.at(static_cast<size_t>(r)) : nullptr);
  MemoryNeed need{static_cast<double>(rank_state(c, rank_parameters(c, stages, r)).total()),
                  static_cast<double>(activations)};
  need.gathered = static_cast<double>(zero_gathered(c, stages, schedule, r));
  need.checkpoint = static_cast<double>(checkpoint_staging_bytes(c, r));
  if (c.pp > 1) need.pp_rank = r;
  return need;
}

// Refused in doubles (kExactLimit): nothing past it is counted exactly.
std::optional<MemoryNeed> absurd(const TrainConfig& c) {
  const nn::GPTConfig& m = c.model;
  const double B = static_cast<double>(c.batch_size), t = static_cast<double>(c.tp), p = static_cast<double>(c.pp);
  const double rough = 16.0 * rough_parameters(m) + rough_activations(m, B);
  if (!(rough < kExactLimit)) return MemoryNeed{rough / (t * p), 0.0};
  return std::nullopt;
}

}  // namespace

MemoryNeed rank_training_memory(const TrainConfig& c, int64_t pp_rank, parallel::pipeline::Receivers receivers) {
  if (const std::optional<MemoryNeed> rough = absurd(c)) return *rough;
  const std::optional<parallel::pipeline::Schedule> schedule = run_schedule(c);
  return rank_memory(c, virtual_stages(c), schedule, reaped_of(schedule, receivers), pp_rank);
}

namespace {

// training_memory's count, with a dropless mixture's rows `skewed` or not.
MemoryNeed most_training_memory(const TrainConfig& c, bool skewed) {
  if (const std::optional<MemoryNeed> rough = absurd(c)) return *rough;
  const std::vector<nn::GPTStage> stages = virtual_stages(c);
  const std::optional<parallel::pipeline::Schedule> schedule = run_schedule(c);
  const std::vector<std::vector<size_t>> reaped = reaped_of(schedule, parallel::pipeline::Receivers::Late);
  MemoryNeed most;  // the pipeline rank needing the most
  for (int64_t r = 0; r < c.pp; ++r) {
    const MemoryNeed here = rank_memory(c, stages, schedule, reaped, r, skewed);
    if (r == 0 || here.total() > most.total()) most = here;
  }
  return most;
}

}  // namespace

MemoryNeed training_memory(const TrainConfig& c) { return most_training_memory(c, false); }

std::optional<MemoryNeed> skewed_routing_memory(const TrainConfig& c) {
  const nn::MoeConfig& moe = c.model.moe;
  if (c.ep == 1 || !moe.enabled() || !nn::capacity_never_drops(moe.capacity_factor, moe.top_k, moe.experts))
    return std::nullopt;
  return most_training_memory(c, true);
}

plan::Grid3DActivationShape grid_3d_activation_shape(const TrainConfig& c) {
  const plan::RankShape s = rank_shape(c);
  return {.B = s.batch, .T = s.seq, .C = s.hidden, .NH = s.heads, .L = c.model.n_layer, .V = s.vocab,
          .row = s.grid_row, .col = s.grid_col, .bf16 = s.bf16, .recompute = s.recompute, .selective = s.selective,
          .dropout = s.hidden_dropout, .split = s.grid_splits};
}

int64_t moe_extra_layer_activation_bytes(const TrainConfig& c) { return plan::moe_extra_activation_bytes(rank_shape(c)); }

int64_t layer_activation_bytes(const TrainConfig& c) { return plan::block_activation_bytes(rank_shape(c)); }

double kv_cache_bytes(const nn::GPTConfig& m, int64_t batch, bool bf16) {
  return static_cast<double>(m.n_layer) * 2.0 * static_cast<double>(batch) * static_cast<double>(m.block_size) *
         static_cast<double>(m.n_embd) * (bf16 ? 2.0 : 4.0);
}

namespace {

// A model's fp32 parameters, in bytes.
double parameter_bytes(const nn::GPTConfig& m) {
  return static_cast<double>(plan::model_state_bytes(m.num_parameters(), 1, 0, 0).params);
}

// What a forward pass of `batch` sequences of block_size tokens keeps: every layer's
// activations (as training keeps them) and the logits.
double forward_activations(const nn::GPTConfig& m, int64_t batch) {
  const int64_t layer = plan::activation_bytes_per_layer(batch, m.block_size, m.n_embd, m.n_head, 1, false);
  return static_cast<double>(layer * m.n_layer + 4 * batch * m.block_size * m.resolved_padded_vocab());
}

}  // namespace

MemoryNeed inference_memory(const nn::GPTConfig& m, int64_t batch, bool bf16) {
  // fp32 values, plus their bf16 copies, plus (a batch past the GEMV's rows) the decode
  // step's packed copies in the product's precision (kernels/packed_weights.hpp).
  const double packed = batch > kernels::kGemvMaxRows ? (bf16 ? 2.0 : 4.0) : 0.0;
  const double copies = (bf16 ? 6.0 : 4.0) + packed;
  const double rough = copies * rough_parameters(m) + rough_activations(m, 1.0);
  const double cache = kv_cache_bytes(m, batch, bf16);
  if (!(rough < kExactLimit)) return {.state = rough, .activations = 0.0, .kv_cache = cache};
  return {.state = parameter_bytes(m) * copies / 4.0, .activations = forward_activations(m, 1), .kv_cache = cache};
}

MemoryNeed scoring_memory(const nn::GPTConfig& m, int64_t batch, bool bf16) {
  const double copies = bf16 ? 6.0 : 4.0;
  const double rough = copies * rough_parameters(m) + rough_activations(m, static_cast<double>(batch));
  if (!(rough < kExactLimit)) return {.state = rough, .activations = 0.0};
  return {.state = parameter_bytes(m) * copies / 4.0, .activations = forward_activations(m, batch)};
}

AvailableMemory available_memory() {
  AvailableMemory out;
  const int64_t kib = read_number("/proc/meminfo", "MemAvailable:");
  if (kib >= 0) {
    out = {kib * 1024, "MemAvailable in /proc/meminfo"};
  } else {
    out = {static_cast<int64_t>(::sysconf(_SC_AVPHYS_PAGES)) * ::sysconf(_SC_PAGESIZE), "free pages (sysconf)"};
  }
  // A container's limit (cgroup v2) binds before the machine's memory does.
  const int64_t limit = read_number("/sys/fs/cgroup/memory.max", "");
  const int64_t used = read_number("/sys/fs/cgroup/memory.current", "");
  if (limit > 0 && used >= 0 && limit - used < out.bytes)
    out = {std::max<int64_t>(0, limit - used), "the cgroup's memory.max less memory.current"};
  return out;
}

std::string describe(const MemoryNeed& need) {
  return format(need.total()) + " (state " + format(need.state) +
         (need.gathered > 0 ? " + gathered units " + format(need.gathered) : "") + " + activations " + format(need.activations) +
         (need.kv_cache > 0 ? " + KV cache " + format(need.kv_cache) : "") +
         (need.data > 0 ? " + graph data " + format(need.data) : "") +
         (need.checkpoint > 0 ? " + checkpoint being written " + format(need.checkpoint) : "") + ")";
}

void check_fits_in_memory(const MemoryNeed& need, int ranks_on_host, const std::string& what, const MemoryCheckBy& by) {
  const AvailableMemory available = available_memory();
  const double wanted = need.total() * std::max(1, ranks_on_host);
  check(wanted <= static_cast<double>(available.bytes), what, " needs ", describe(need), " per rank",
        need.pp_rank >= 0 ? " on pipeline rank " + std::to_string(need.pp_rank) + " (the one needing the most)" : "",
        ranks_on_host > 1 ? " x " + std::to_string(ranks_on_host) + " ranks on this host" : "",
        by.command.empty() ? "" : ", as `" + by.command + "` predicts", ", more than the ",
        format_bytes(available.bytes), " this machine has available (", available.source,
        "); ", by.remedy.empty() ? "run it where more memory is free" : by.remedy,
        by.batch_flag.empty() ? ""
        : need.kv_cache > 0   ? ", or generate fewer sequences together (" + by.batch_flag + ")"
                              : ", or score fewer windows at once (" + by.batch_flag + ")");
}

}  // namespace loom::train
