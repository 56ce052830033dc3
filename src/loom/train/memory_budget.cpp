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
#include "loom/parallel/pipeline/held_activations.hpp"
#include "loom/parallel/pipeline/partition.hpp"
#include "loom/parallel/pipeline/schedule_file.hpp"
#include "loom/parallel/tensor_parallel_3d/layers_3d.hpp"
#include "loom/plan/memory_model.hpp"
#include "loom/plan/mixed_precision_cost.hpp"
#include "loom/plan/moe_cost.hpp"
#include "loom/plan/tensor_parallel_3d_memory.hpp"
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

// The parameters one rank holds (its tensor-parallel share), as the state formulas tell them apart.
struct RankParameters {
  int64_t dense = 0;           // every parameter but the experts
  int64_t linear_weights = 0;  // of dense: the blocks' Linear weights, which only GEMMs read
  int64_t kept = 0;            // of dense: the routers' weights, kept in fp32
  int64_t gemm_free = 0;       // of dense: what no GEMM reads (no bf16 copy under DDP)
  int64_t experts = 0;         // E / ep experts of each of its MoE blocks (all E without ep)
  int64_t expert_weights = 0;  // of experts: their weights, which their GEMMs read
};

// A block's four Linears on a 3D grid: attention's qkv (3 blocks) and proj, the MLP's fc and
// proj, each pair's first a column-parallel request and its second a row-parallel one.
struct Linear3DBlock {
  int64_t weights = 0, biases = 0;
};
Linear3DBlock linear_3d_block(int64_t C, const std::array<int64_t, 3>& grid) {
  using parallel::tp3d::Layers3D;
  Linear3DBlock b;
  for (const Layers3D::Share s : {Layers3D::share(C, 3 * C, 3, true, grid), Layers3D::share(C, C, 1, false, grid),
                                  Layers3D::share(C, 4 * C, 1, true, grid), Layers3D::share(4 * C, C, 1, false, grid)}) {
    b.weights += s.weight;
    b.biases += s.bias;
  }
  return b;
}

// Counted over the stages the rank owns, so a stage's MoE blocks are those among its own layers
// (nn::MoeConfig::is_moe_block: block l when l + 1 is a multiple of `every`) and the tables sit
// on the first and last stages.
RankParameters rank_parameters(const TrainConfig& c, const std::vector<nn::GPTStage>& stages, int64_t pp_rank) {
  const nn::GPTConfig& m = c.model;
  const int64_t C = m.n_embd, t = c.tp, table = m.resolved_padded_vocab() / t * C;
  const int64_t local_experts = m.moe.enabled() ? m.moe.experts / c.ep : 0;
  RankParameters r;
  for (size_t k = static_cast<size_t>(pp_rank); k < stages.size(); k += static_cast<size_t>(c.pp)) {
    const nn::GPTStage& s = stages[k];
    const int64_t blocks = s.end_block - s.first_block;
    const int64_t moe = m.moe.enabled() ? s.end_block / m.moe.every - s.first_block / m.moe.every : 0;
    // Every block: attention's qkv (split over tp with its bias) and proj (split, its bias
    // replicated), two LayerNorms. A dense block's MLP: fc (split with its bias) and proj (split,
    // its bias replicated). An MoE block's: a router (no bias) and the experts, replicated over tp.
    if (c.tp_3d_on()) {
      // A grid rank holds its shard of each Linear3D and the layers the grid cannot split whole
      // (Layers3D::share); no mixture of experts under a grid.
      const Linear3DBlock b = linear_3d_block(C, c.tp_3d_grid());
      r.linear_weights += blocks * b.weights;
      r.gemm_free += blocks * (b.biases + 4 * C);
    } else {
      r.linear_weights += blocks * 4 * C * C / t + (blocks - moe) * 8 * C * C / t;
      r.gemm_free += blocks * (3 * C / t + C + 4 * C) + (blocks - moe) * (4 * C / t + C);
    }
    r.kept += moe * m.moe.experts * C;
    r.experts += moe * local_experts * plan::expert_mlp_parameters(C);
    r.expert_weights += moe * local_experts * 8 * C * C;
    // The token table: the LM head's GEMMs read it; a first stage without the head only looks
    // rows up. The position table and the final LayerNorm no GEMM reads.
    if (s.head) r.dense += table;
    if (s.embedding) r.gemm_free += m.block_size * C + (s.head ? 0 : table);
    if (s.head) r.gemm_free += 2 * C;
  }
  r.dense += r.linear_weights + r.kept + r.gemm_free;
  return r;
}

// The model state of `params` parameters ZeRO shards (or DDP replicates), in the run's precision:
// plan::model_state_bytes in fp32, the mixed-precision formulas (plan/mixed_precision_cost.hpp)
// in bf16, of which gemm_only only GEMMs read, kept stay fp32 and gemm_free no GEMM reads.
plan::StateBytes sharded_state(const TrainConfig& c, int64_t params, int64_t gemm_only, int64_t kept,
                               int64_t gemm_free) {
  const int64_t optimizer = c.optimizer == "adamw" ? 8 : 4;
  const int shards = static_cast<int>(c.shard_size()), zero = static_cast<int>(c.zero);
  if (c.precision != "bf16") return plan::model_state_bytes(params, shards, zero, optimizer);
  return plan::mixed_precision_state_bytes(params, params - gemm_only - kept, shards, zero, optimizer, kept, gemm_free);
}

plan::StateBytes rank_state(const TrainConfig& c, const RankParameters& r) {
  // 3D tensor parallelism's weights keep their fp32 value (no ZeRO under 3D to hold them in bf16 only).
  const int64_t gemm_only = c.tp_3d.empty() ? r.linear_weights : 0;
  // Without ep ZeRO shards the experts with the rest (plan::experts_sharded_by_zero); under ep
  // (or DDP) a rank keeps its E / ep experts of each MoE block whole, outside ZeRO
  // (ExpertDataParallel), with a bf16 copy of their weights in bf16 (their biases are read in fp32).
  if (c.ep == 1 && c.zero >= 1)
    return sharded_state(c, r.dense + r.experts, gemm_only, r.kept, r.gemm_free + r.experts - r.expert_weights);
  const plan::StateBytes dense = sharded_state(c, r.dense, gemm_only, r.kept, r.gemm_free);
  const plan::StateBytes experts = plan::unsharded_state_bytes(r.experts, c.precision == "bf16" ? r.expert_weights : 0,
                                                               c.optimizer == "adamw" ? 8 : 4);
  return {dense.params + experts.params, dense.grads + experts.grads, dense.optimizer + experts.optimizer};
}

}  // namespace

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

// State and activations of pipeline rank r: the activations its chunks keep for each
// (micro-batch, chunk) its schedule holds at once, and what one layer at a time adds.
MemoryNeed rank_memory(const TrainConfig& c, const std::vector<nn::GPTStage>& stages,
                       const std::optional<parallel::pipeline::Schedule>& schedule, int64_t r) {
  if (c.tp_3d_on())  // a grid rank: no pipeline, one micro-batch (validate_tp_3d)
    return {static_cast<double>(rank_state(c, rank_parameters(c, stages, r)).total()),
            static_cast<double>(plan::grid_3d_activation_bytes(grid_3d_activation_shape(c)))};
  const nn::GPTConfig& m = c.model;
  const int64_t T = m.block_size / c.cp, C = m.n_embd;  // this rank's tokens of each sequence
  const int64_t layer = layer_activation_bytes(c);
  // A mixture of experts' blocks keep more (its routed rows; every tp rank's tokens).
  const int64_t moe_extra = m.moe.enabled() ? moe_extra_layer_activation_bytes(c) : 0;
  // With recompute a block keeps only its input (in bf16 under mixed precision, this rank's
  // chunk of the sequence under sequence parallelism); one block's activations exist at a time.
  const int64_t input_bytes = (c.precision == "bf16" ? 2 : 4) * c.batch_size * (c.sequence_parallel ? T / c.tp : T) * C;
  // The head's stage keeps the logits in fp32 (the loss turns them into their gradient in place,
  // kept to the head's backward), the final LayerNorm's input and output (bf16 copies in bf16)
  // and its statistics; in bf16 the head's backward adds a bf16 copy of their gradient's rows,
  // nn::GPT::kHeadGradientRows at a time.
  const int64_t Vt = m.resolved_padded_vocab() / c.tp;
  const int64_t final_norm = 2 * (c.precision == "bf16" ? 2 : 4) * c.batch_size * T * C + 8 * c.batch_size * T;
  const int64_t logits = 4 * c.batch_size * T * Vt + final_norm;
  const int64_t head_gradient =
      c.precision == "bf16" ? 2 * std::min(c.batch_size * m.block_size, nn::GPT::kHeadGradientRows) * Vt : 0;
  std::vector<int64_t> chunk_bytes;
  bool moe_here = false, moe_last = false, head_here = false;
  for (size_t k = static_cast<size_t>(r); k < stages.size(); k += static_cast<size_t>(c.pp)) {
    const nn::GPTStage& s = stages[k];
    const int64_t blocks = s.end_block - s.first_block;
    const int64_t moe = m.moe.enabled() ? s.end_block / m.moe.every - s.first_block / m.moe.every : 0;
    moe_here = moe_here || moe > 0;
    moe_last = moe_last || (m.moe.enabled() && s.end_block % m.moe.every == 0);
    head_here = head_here || s.head;
    chunk_bytes.push_back((m.recompute ? input_bytes * blocks : layer * blocks + moe_extra * moe) + (s.head ? logits : 0));
  }
  // Without a schedule to walk (no pipeline, or one the executor refuses): one micro-batch.
  int64_t kept = 0;
  if (schedule) kept = parallel::pipeline::peak_held_bytes(schedule->ranks.at(static_cast<size_t>(r)), chunk_bytes);
  else for (const int64_t bytes : chunk_bytes) kept += bytes;
  if (m.recompute) kept += layer + (moe_here ? moe_extra : 0);  // the block re-run in backward
  // Ring attention's scratch while one layer runs: a block's scores and their gradient, (B, NH, T/(2cp), T/(2cp)) each.
  const int64_t Tc = m.block_size / (2 * c.cp), ring = c.cp > 1 ? 2 * 4 * c.batch_size * (m.n_head / c.tp) * Tc * Tc : 0;
  // Under bf16 one layer's attention backward recomputes a group of heads' probabilities.
  const int64_t recomputed = c.precision == "bf16" && c.cp == 1
                                 ? plan::bf16_attention_backward_bytes(c.batch_size, m.block_size, C, m.n_head, c.tp)
                                 : 0;
  // A chunk's backward starts at its last block with all of the chunk's activations held: the
  // fp32 gradients it passes on (the residual stream's, its branch's, its LayerNorm's), and when
  // that block is a mixture of experts the gradient of its routed rows' hidden values (N K 4C,
  // in bf16 the GEMM operand's precision).
  const int64_t Tr = c.sequence_parallel ? T / c.tp : T;
  const int64_t routed = Tr * c.batch_size * (m.moe.enabled() ? m.moe.top_k : 0);
  const int64_t scratch = 3 * 4 * c.batch_size * Tr * C + (moe_last ? (c.precision == "bf16" ? 2 : 4) * routed * 4 * C : 0);
  // The head's backward (its gradient rows) runs before the blocks' and is done by then.
  const int64_t once = std::max(head_here ? head_gradient : 0, ring + recomputed + scratch);
  MemoryNeed need{static_cast<double>(rank_state(c, rank_parameters(c, stages, r)).total()),
                  static_cast<double>(kept + once)};
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

MemoryNeed rank_training_memory(const TrainConfig& c, int64_t pp_rank) {
  if (const std::optional<MemoryNeed> rough = absurd(c)) return *rough;
  return rank_memory(c, virtual_stages(c), run_schedule(c), pp_rank);
}

MemoryNeed training_memory(const TrainConfig& c) {
  if (const std::optional<MemoryNeed> rough = absurd(c)) return *rough;
  const std::vector<nn::GPTStage> stages = virtual_stages(c);
  const std::optional<parallel::pipeline::Schedule> schedule = run_schedule(c);
  MemoryNeed most;  // the pipeline rank needing the most
  for (int64_t r = 0; r < c.pp; ++r) {
    const MemoryNeed here = rank_memory(c, stages, schedule, r);
    if (r == 0 || here.total() > most.total()) most = here;
  }
  return most;
}

plan::Grid3DActivationShape grid_3d_activation_shape(const TrainConfig& c) {
  using parallel::tp3d::Layers3D;
  const nn::GPTConfig& m = c.model;
  const std::array<int64_t, 3> g = c.tp_3d_grid();
  const int64_t C = m.n_embd;
  return {.B = c.batch_size, .T = m.block_size, .C = C, .NH = m.n_head, .L = m.n_layer, .V = m.resolved_padded_vocab(),
          .row = g[0], .col = g[1], .bf16 = c.precision == "bf16", .recompute = m.recompute,
          .split = {Layers3D::splits(C, 3 * C, 3, true, g), Layers3D::splits(C, C, 1, false, g),
                    Layers3D::splits(C, 4 * C, 1, true, g), Layers3D::splits(4 * C, C, 1, false, g)}};
}

int64_t moe_extra_layer_activation_bytes(const TrainConfig& c) {
  const nn::GPTConfig& m = c.model;
  return plan::moe_extra_activation_bytes_per_layer(c.batch_size, m.block_size, m.n_embd, c.tp, c.sequence_parallel,
                                                    c.cp, m.moe.experts, m.moe.top_k, c.precision == "bf16");
}

int64_t layer_activation_bytes(const TrainConfig& c) {
  const nn::GPTConfig& m = c.model;
  return c.precision == "bf16" ? plan::bf16_activation_bytes_per_layer(c.batch_size, m.block_size, m.n_embd, m.n_head,
                                                                       c.tp, c.sequence_parallel, c.cp)
                               : plan::activation_bytes_per_layer(c.batch_size, m.block_size, m.n_embd, m.n_head, c.tp,
                                                                  c.sequence_parallel, c.cp);
}

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
  return format(need.total()) + " (state " + format(need.state) + " + activations " + format(need.activations) +
         (need.kv_cache > 0 ? " + KV cache " + format(need.kv_cache) : "") +
         (need.data > 0 ? " + graph data " + format(need.data) : "") + ")";
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
