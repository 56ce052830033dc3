#include "loom/train/memory_budget.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "loom/error.hpp"
#include "loom/kernels/gemv.hpp"
#include "loom/plan/memory_model.hpp"
#include "loom/plan/mixed_precision_cost.hpp"
#include "loom/plan/moe_cost.hpp"
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

}  // namespace

// A pipeline rank holds about 1/pp of the blocks and of the parameters.
int64_t pipeline_rank_layers(const TrainConfig& c) { return (c.model.n_layer + c.pp - 1) / c.pp; }

plan::StateBytes rank_training_state(const TrainConfig& c) {
  const nn::GPTConfig& m = c.model;
  const int64_t params = m.num_parameters(c.tp) / c.pp, layers = pipeline_rank_layers(c);
  // Under ep (or DDP) a rank keeps E / ep experts of each MoE block whole, outside ZeRO
  // (ExpertDataParallel); without ep ZeRO shards them with the rest (plan::experts_sharded_by_zero).
  if ((c.ep == 1 && c.zero >= 1) || !m.moe.enabled()) return training_state(c, params, layers);
  int64_t moe_blocks = 0;
  for (int64_t l = 0; l < m.n_layer; ++l) moe_blocks += m.moe.is_moe_block(l) ? 1 : 0;
  const int64_t expert = plan::expert_mlp_parameters(m.n_embd);
  const int64_t all_experts = moe_blocks * m.moe.experts * expert / c.pp;
  const int64_t experts_here = moe_blocks * (m.moe.experts / c.ep) * expert / c.pp;
  // In bf16 the experts' weights get a bf16 copy, their biases none.
  const int64_t weights_here = moe_blocks * (m.moe.experts / c.ep) * 8 * m.n_embd * m.n_embd / c.pp;
  const plan::StateBytes dense = training_state(c, params - all_experts, layers);
  const plan::StateBytes experts = plan::unsharded_state_bytes(experts_here, c.precision == "bf16" ? weights_here : 0,
                                                               c.optimizer == "adamw" ? 8 : 4);
  return {dense.params + experts.params, dense.grads + experts.grads, dense.optimizer + experts.optimizer};
}

MemoryNeed training_memory(const TrainConfig& c) {
  const nn::GPTConfig& m = c.model;
  const double B = static_cast<double>(c.batch_size), t = static_cast<double>(c.tp), p = static_cast<double>(c.pp);
  const double rough = 16.0 * rough_parameters(m) + rough_activations(m, B);
  if (!(rough < kExactLimit)) return {rough / (t * p), 0.0};
  const int64_t layers_here = pipeline_rank_layers(c);
  const plan::StateBytes state = rank_training_state(c);
  const int64_t T = m.block_size / c.cp, C = m.n_embd;  // this rank's tokens of each sequence
  const int64_t layer = layer_activation_bytes(c);
  // A mixture of experts' blocks keep more (its routed rows; every tp rank's tokens): at most
  // one in `every` of this rank's blocks, rounded up.
  const int64_t moe_here = m.moe.enabled() ? (layers_here + m.moe.every - 1) / m.moe.every : 0;
  const int64_t moe_extra = m.moe.enabled() ? moe_extra_layer_activation_bytes(c) : 0;
  // With recompute a block keeps only its input (in bf16 under mixed precision, this rank's
  // chunk of the sequence under sequence parallelism); one block's activations exist at a time.
  const int64_t input_bytes = (c.precision == "bf16" ? 2 : 4) * c.batch_size * (c.sequence_parallel ? T / c.tp : T) * C;
  const int64_t kept = m.recompute ? input_bytes * layers_here + layer + (moe_here > 0 ? moe_extra : 0)
                                   : layer * layers_here + moe_extra * moe_here;
  // The logits stay fp32 (the loss reads them); in bf16 the head's backward adds a bf16 copy
  // of their gradient's rows, nn::GPT::kHeadGradientRows at a time.
  const int64_t Vt = m.resolved_padded_vocab() / c.tp;
  const int64_t logits = 4 * c.batch_size * T * Vt +
                         (c.precision == "bf16" ? 2 * std::min(c.batch_size * m.block_size, nn::GPT::kHeadGradientRows) * Vt : 0);
  // Ring attention's scratch while one layer runs: a block's scores and their gradient, (B, NH, T/(2cp), T/(2cp)) each.
  const int64_t Tc = m.block_size / (2 * c.cp), ring = c.cp > 1 ? 2 * 4 * c.batch_size * (m.n_head / c.tp) * Tc * Tc : 0;
  // Under bf16 one layer's attention backward recomputes a group of heads' probabilities.
  const int64_t recomputed = c.precision == "bf16" && c.cp == 1
                                 ? plan::bf16_attention_backward_bytes(c.batch_size, m.block_size, C, m.n_head, c.tp)
                                 : 0;
  return {static_cast<double>(state.total()), static_cast<double>(kept + logits + ring + recomputed)};
}

plan::StateBytes training_state(const TrainConfig& c, int64_t params, int64_t layers) {
  const int64_t optimizer = c.optimizer == "adamw" ? 8 : 4;
  if (c.precision != "bf16")
    return plan::model_state_bytes(params, static_cast<int>(c.shard_size()), static_cast<int>(c.zero), optimizer);
  // The blocks' Linear weights are read by GEMMs only (held in bf16 alone under ZeRO-1/2):
  // attention's in every block, the MLP's in a dense one; every other parameter keeps an fp32
  // value. 3D tensor parallelism's weights keep theirs (no ZeRO under 3D), experts are not
  // Linear layers, and a mixture of experts' router is kept in fp32 alone (no bf16 copy).
  const nn::GPTConfig& m = c.model;
  int64_t moe_blocks = 0;
  for (int64_t l = 0; l < m.n_layer; ++l) moe_blocks += m.moe.is_moe_block(l) ? 1 : 0;
  const int64_t moe_here = m.n_layer > 0 ? moe_blocks * layers / m.n_layer : 0;  // exact without a pipeline
  const int64_t C = m.n_embd;
  const int64_t gemm_only = c.tp_3d.empty() ? (layers * 4 + (layers - moe_here) * 8) * C * C / c.tp : 0;
  const int64_t kept = std::min(params, moe_here * C * m.moe.experts);
  return plan::mixed_precision_state_bytes(params, params - std::min(params, gemm_only + kept),
                                           static_cast<int>(c.shard_size()), static_cast<int>(c.zero), optimizer, kept);
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
        ranks_on_host > 1 ? " x " + std::to_string(ranks_on_host) + " ranks on this host" : "",
        by.command.empty() ? "" : ", as `" + by.command + "` predicts", ", more than the ",
        format_bytes(available.bytes), " this machine has available (", available.source,
        "); ", by.remedy.empty() ? "run it where more memory is free" : by.remedy,
        by.batch_flag.empty() ? ""
        : need.kv_cache > 0   ? ", or generate fewer sequences together (" + by.batch_flag + ")"
                              : ", or score fewer windows at once (" + by.batch_flag + ")");
}

}  // namespace loom::train
