#include "loom/plan/layout_cost.hpp"

#include <algorithm>
#include <optional>

#include "loom/parallel/pipeline/held_activations.hpp"
#include "loom/plan/memory_model.hpp"
#include "loom/plan/pipeline_ranks.hpp"
#include "loom/plan/tensor_parallel_3d_layout.hpp"
#include "loom/plan/moe_cost.hpp"
#include "loom/plan/mixed_precision_cost.hpp"

namespace loom::plan {

namespace {

// Model-state bytes per device: fp32 as memory_model.hpp counts them (4 + 4 + 8); mixed
// precision 2-byte weights and gradients and 12 bytes of fp32 master weights and moments,
// ZeRO sharding the 12, then the gradients, then the weights over dp.
int64_t state_bytes(const ClusterSpec& c, int64_t params, int64_t dp, int zero) {
  if (c.precision == Precision::Fp32) return model_state_bytes(params, static_cast<int>(dp), zero, 8).total();
  const int64_t n = dp;
  const int64_t state[] = {16 * params, 4 * params + 12 * params / n, 2 * params + 14 * params / n, 16 * params / n};
  return state[std::clamp(zero, 0, 3)];
}

}  // namespace

namespace {

// model_state_bytes_per_device of a device holding the stages `s` (its blocks, the mixtures of
// experts among them, whether it has the LM head).
int64_t rank_state_bytes(const ModelSpec& model, const ClusterSpec& cluster, const Layout& l, int64_t params_here,
                         const RankStages& s, bool with_experts) {
  const int zero = l.dp > 1 ? l.zero : 0;
  // A mixture of experts' experts: without ep ZeRO shards them with the rest (one
  // ShardedDataParallel over every parameter); under ep (or without ZeRO) a device keeps its
  // E / ep whole, reduced by DDP.
  const int64_t experts =
      with_experts && model.moe.experts > 0 ? s.moe_blocks * (model.moe.experts / l.ep) * expert_mlp_parameters(model.hidden) : 0;
  const bool sharded_experts = experts_sharded_by_zero(model, l);
  const int64_t sharded = params_here + (sharded_experts ? experts : 0);
  // Each expert's weights (8 h^2 of its parameters), which its GEMMs read.
  const int64_t expert_weights = experts / expert_mlp_parameters(model.hidden) * 8 * model.hidden * model.hidden;
  int64_t bytes = 0;
  if (cluster.precision == Precision::Bf16) {
    // Only Linear weights are read by GEMMs alone: attention's in every block, the MLP's in a
    // dense block (experts are stacked tensors, routers kept in fp32). GEMMs also read the
    // token table on a stage with the LM head (a first stage without it only looks rows up)
    // and the experts' weights; the rest (LayerNorms, biases, the position table) no GEMM
    // reads, and DDP gives them no bf16 copy.
    const int64_t h = model.hidden, blocks = s.blocks, moe = s.moe_blocks;
    const int64_t gemm_only = (blocks * 4 * h * h + (blocks - moe) * 8 * h * h) / l.tp;
    const int64_t kept = moe * h * model.moe.experts, head = s.head ? model.vocab * h / l.tp : 0;
    const int64_t gemm_read = gemm_only + head + (sharded_experts ? expert_weights : 0);
    bytes = bf16_state_bytes(sharded, gemm_only, l.dp, zero, kept, std::max<int64_t>(0, sharded - kept - gemm_read));
  } else {
    bytes = state_bytes(cluster, sharded, l.dp, zero);
  }
  // Whole, with a bf16 copy of each expert's weights in bf16.
  if (!sharded_experts)
    bytes += unsharded_state_bytes(experts, cluster.precision == Precision::Bf16 ? expert_weights : 0).total();
  return bytes;
}

// The parameters besides the experts of a pipeline rank holding `s`: its blocks (an MoE
// block's MLP a router), the token table (over tp) on the first stage and the LM head's copy on
// the last, the position table on the first, the final LayerNorm on the last.
int64_t rank_dense_parameters(const ModelSpec& m, const Layout& l, const RankStages& s) {
  const int64_t h = m.hidden, swap = h * m.moe.experts - expert_mlp_parameters(h) / l.tp;
  return s.blocks * (12 * h * h + 13 * h) / l.tp + (m.moe.experts > 0 ? s.moe_blocks * swap : 0) +
         (s.embedding ? m.vocab * h / l.tp + m.seq * h : 0) + (s.head ? m.vocab * h / l.tp + 2 * h : 0);
}

}  // namespace

int64_t model_state_bytes_per_device(const ModelSpec& model, const ClusterSpec& cluster, const Layout& l,
                                     int64_t params_here, bool with_experts) {
  // An even share of the blocks, the first stage's under a pipeline (no head).
  RankStages s;
  s.blocks = model.layers / l.pp;
  s.moe_blocks = moe_layers(model) / l.pp;
  s.head = l.pp == 1;
  return rank_state_bytes(model, cluster, l, params_here, s, with_experts);
}

double layer_activation_bytes(const ModelSpec& m, const ClusterSpec& c, const Layout& l, bool recompute) {
  const double s = static_cast<double>(m.seq / l.cp), b = static_cast<double>(l.micro_batch),
               h = static_cast<double>(m.hidden), a = static_cast<double>(m.heads), t = static_cast<double>(l.tp);
  const bool sp = l.sequence_parallel && l.tp > 1;
  const double bpv = static_cast<double>(value_bytes(c.precision));
  if (recompute) return bpv * s * b * h / (sp ? t : 1.0);
  if (c.precision == Precision::Fp32)  // Loom's layer, as its memory tracker measures it
    return static_cast<double>(activation_bytes_per_layer(l.micro_batch, m.seq, m.hidden, m.heads, l.tp, sp, l.cp));
  if (c.precision == Precision::Bf16)  // the same layer keeping bf16 copies (mixed_precision_cost.hpp)
    return static_cast<double>(bf16_activation_bytes_per_layer(l.micro_batch, m.seq, m.hidden, m.heads, l.tp, sp, l.cp));
  if (l.cp > 1) return s * b * h * (sp ? 34.0 / t : 10.0 + 24.0 / t);
  if (sp) return s * b * h * (34.0 + 5.0 * a * s / h) / t;
  return s * b * h * (10.0 + 24.0 / t + 5.0 * a * s / (h * t));
}

namespace {

// The activations pipeline rank r holds at once: each (micro-batch, chunk) pair its schedule
// holds keeps its chunk's layers (and a mixture of experts' routed rows) and, in Loom's own
// precisions, what outside the layers the chunk keeps: on the last stage the final LayerNorm's
// input and output (bf16 copies in bf16) and statistics, and the fp32 logits (B, T, V/t), which
// the loss turns into their gradient in place (train::rank_training_memory counts the same). Then what one layer at a time adds: a recomputed block's re-run,
// bf16 attention's recomputed probabilities, the gradients a chunk's first backward passes on,
// or before it the head's bf16 gradient rows (the logits' gradient converted
// nn::GPT::kHeadGradientRows rows at a time).
int64_t rank_activation_bytes(const ModelSpec& model, const ClusterSpec& cluster, const Layout& l, const RankStages& s,
                              const std::optional<parallel::pipeline::Schedule>& schedule, size_t r) {
  const bool loom = cluster.precision != Precision::Mixed, bf16 = cluster.precision == Precision::Bf16;
  const bool sp = l.sequence_parallel && l.tp > 1;
  const double tokens = static_cast<double>(l.micro_batch * model.seq / l.cp), h = static_cast<double>(model.hidden);
  const double V = static_cast<double>(model.vocab / l.tp);
  const double layer = layer_activation_bytes(model, cluster, l, l.recompute);
  const double moe_extra =
      loom && model.moe.experts > 0
          ? static_cast<double>(moe_extra_activation_bytes_per_layer(l.micro_batch, model.seq, model.hidden, l.tp, sp, l.cp,
                                                                     model.moe.experts, model.moe.top_k, bf16))
          : 0.0;
  std::vector<int64_t> chunk_bytes;
  for (const nn::GPTStage& chunk : s.chunks) {
    double bytes = layer * static_cast<double>(chunk.end_block - chunk.first_block);
    if (!l.recompute) bytes += moe_extra * static_cast<double>(moe_blocks(model, chunk));
    if (loom && chunk.head) bytes += (bf16 ? 2.0 : 4.0) * 2.0 * tokens * h + 4.0 * 2.0 * tokens + 4.0 * tokens * V;
    chunk_bytes.push_back(static_cast<int64_t>(bytes));
  }
  int64_t held = 0;
  if (schedule) held = parallel::pipeline::peak_held_bytes(schedule->ranks.at(r), chunk_bytes);
  else for (const int64_t bytes : chunk_bytes) held += bytes;
  if (l.recompute) held += static_cast<int64_t>(layer_activation_bytes(model, cluster, l, false) + (s.moe_blocks > 0 ? moe_extra : 0.0));
  double once = 0.0;
  if (bf16 && l.cp == 1)
    once += static_cast<double>(bf16_attention_backward_bytes(l.micro_batch, model.seq, model.hidden, model.heads, l.tp));
  if (loom) {
    // A chunk's backward starts at its last block with the chunk's activations held: the three
    // fp32 (B, T, C) gradients it passes on, and for a mixture of experts its routed rows' hidden
    // gradient (N K 4h, bf16 in bf16), as train::rank_training_memory counts them. The head's
    // backward, before it, holds its bf16 gradient rows instead.
    bool moe_last = false;
    for (const nn::GPTStage& chunk : s.chunks)
      moe_last = moe_last || (model.moe.experts > 0 && chunk.end_block % model.moe.every == 0);
    const double rows = tokens / (sp ? static_cast<double>(l.tp) : 1.0);
    const double scratch = 12.0 * rows * h + (moe_last ? (bf16 ? 2.0 : 4.0) * rows * static_cast<double>(model.moe.top_k) * 4.0 * h : 0.0);
    const double head_rows = bf16 && s.head ? 2.0 * std::min(tokens, static_cast<double>(kBf16HeadGradientRows)) * V : 0.0;
    once = std::max(head_rows, once + scratch);
  }
  return held + static_cast<int64_t>(once);
}

}  // namespace

std::vector<int64_t> context_parallel_degrees(const ModelSpec& model, int64_t devices, const SearchSpace& space) {
  std::vector<int64_t> degrees = {1};
  if (model.seq < space.cp_from_seq) return degrees;
  for (int64_t cp = 2; cp <= devices; cp *= 2)
    if (devices % cp == 0 && model.seq % (2 * cp) == 0) degrees.push_back(cp);
  return degrees;
}

LayoutCost predict(const ModelSpec& model, const ClusterSpec& cluster, const Layout& l, int64_t global_batch) {
  if (l.tensor_parallel_3d()) return predict_tensor_parallel_3d(model, cluster, l, global_batch);
  LayoutCost c;
  c.layout = l;
  auto invalid = [&](std::string why) {
    c.why_not = std::move(why);
    return c;
  };
  if (model.heads % l.tp != 0)
    return invalid("heads: tp " + std::to_string(l.tp) + " does not divide the " + std::to_string(model.heads) + " heads");
  if (model.layers % (l.pp * l.chunks) != 0)
    return invalid("layers: pp x chunks " + std::to_string(l.pp * l.chunks) + " does not divide the " +
                   std::to_string(model.layers) + " layers");
  if (global_batch % (l.dp * l.micro_batch) != 0)
    return invalid("batch: dp x micro-batch " + std::to_string(l.dp * l.micro_batch) + " does not divide the global batch " +
                   std::to_string(global_batch));
  if (l.cp > 1 && model.seq % (2 * l.cp) != 0)
    return invalid("sequence: 2 x cp " + std::to_string(2 * l.cp) + " does not divide the sequence of " +
                   std::to_string(model.seq) + " tokens");
  const int64_t m = global_batch / (l.dp * l.micro_batch);
  if (l.chunks > 1 && (l.pp == 1 || m % l.pp != 0))
    return invalid("interleaving: needs pp > 1 and the micro-batches (" + std::to_string(m) + ") divisible by pp");
  c.micro_batches = m;
  if (l.ep > 1 && (model.moe.experts == 0 || l.dp % l.ep != 0 || model.moe.experts % l.ep != 0))
    return invalid("experts: ep " + std::to_string(l.ep) + " must divide dp and the " + std::to_string(model.moe.experts) + " experts");

  // Memory: the pipeline rank needing the most, its model state (the stages it owns) and the
  // activations its schedule holds at once.
  const int64_t params = dense_parameters_per_device(model, l);
  const int zero = l.dp > 1 ? l.zero : 0;
  const std::vector<RankStages> ranks = rank_stages(model, l);
  const std::optional<parallel::pipeline::Schedule> schedule = planned_schedule(l, m);
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankStages& s = ranks[r];
    const int64_t params_here = l.pp > 1 ? rank_dense_parameters(model, l, s) : params;
    const int64_t dense = rank_state_bytes(model, cluster, l, params_here, s, false);
    const int64_t experts = rank_state_bytes(model, cluster, l, params_here, s, true) - dense;
    const int64_t activations = rank_activation_bytes(model, cluster, l, s, schedule, r);
    if (r == 0 || dense + experts + activations > c.memory_bytes()) {
      c.state_bytes = dense + experts;
      c.expert_state_bytes = experts;
      c.activation_bytes = activations;
    }
  }
  if (zero == 3) {
    // Gathered whole while in use: the root unit (embeddings, final LayerNorm) and a layer
    // plus the prefetched next one, weights and their gradients before the reduce-scatter.
    // Without ep an MoE block's unit holds its router and all its experts.
    const int64_t layer = (12 * model.hidden * model.hidden + 13 * model.hidden) / l.tp;
    const int64_t root = model.vocab * model.hidden / l.tp + model.seq * model.hidden + 2 * model.hidden;
    int64_t pair = 2 * layer;
    if (experts_sharded_by_zero(model, l)) {
      const int64_t mlp = expert_mlp_parameters(model.hidden);
      const int64_t moe_block = layer - mlp / l.tp + model.hidden * model.moe.experts + model.moe.experts * mlp;
      pair = model.moe.every == 1 ? 2 * moe_block : moe_block + layer;
    }
    c.state_bytes += 2 * value_bytes(cluster.precision) * (root + pair);
  }
  const int64_t usable = cluster.memory_bytes - cluster.reserved_bytes;
  if (c.memory_bytes() > usable)
    return invalid("out of memory: " + std::to_string(c.memory_bytes() >> 20) + " MiB needed per device, " +
                   std::to_string(usable >> 20) + " MiB available");

  c.time = step_time(model, cluster, l, m, params);
  c.time.compute_s *= moe_compute_ratio(model, l);  // K expert MLPs per MoE block, priced as the dense ones
  const int64_t devices = l.dp * l.pp * l.tp * l.cp;
  const bool ep_in_node = l.ep * l.pp * l.tp * l.cp <= cluster.devices_per_node;  // ep: neighbouring dp ranks
  c.time.ep_comm_s = all_to_all_seconds(model, l, m, wire_bytes(cluster.precision),
                                        ep_in_node ? cluster.intra_node : cluster.inter_node);
  const double flops = model.flops_per_sequence(l.recompute) * moe_flops_ratio(model) * static_cast<double>(global_batch);
  c.flops_per_device = flops / c.step_s() / static_cast<double>(devices);
  c.valid = true;
  return c;
}

std::vector<LayoutCost> search(const ModelSpec& model, const ClusterSpec& cluster, int64_t devices,
                               int64_t global_batch, const SearchSpace& space) {
  std::vector<LayoutCost> valid, rejected;
  for (int64_t cp : context_parallel_degrees(model, devices, space))
  for (int64_t tp = 1; tp <= std::min(devices / cp, cluster.devices_per_node); ++tp) {
    if ((devices / cp) % tp != 0 || cluster.devices_per_node % tp != 0) continue;
    for (int64_t pp = 1; pp <= devices / (cp * tp); ++pp) {
      if ((devices / (cp * tp)) % pp != 0) continue;
      for (int64_t mb : space.micro_batches)
        for (int64_t chunks : space.chunks) {
          if (chunks > 1 && pp == 1) continue;
          for (bool recompute : space.recompute) {
            Layout l{devices / (cp * tp * pp), pp, tp, chunks, mb, space.zero, recompute,
                     space.sequence_parallel && tp > 1};
            l.cp = cp;
            l.bucket_bytes = space.bucket_bytes;
            // Expert parallelism: every degree dividing dp and the experts.
            for (l.ep = 1; l.ep <= l.dp; ++l.ep) {
              if (l.ep > 1 && (l.dp % l.ep != 0 || model.moe.experts % l.ep != 0)) continue;
              LayoutCost c = predict(model, cluster, l, global_batch);
              (c.valid ? valid : rejected).push_back(c);
              if (model.moe.experts == 0) break;
            }
          }
        }
    }
  }
  if (space.tensor_parallel_3d)
    for (LayoutCost& c : tensor_parallel_3d_layouts(model, cluster, devices, global_batch, space))
      (c.valid ? valid : rejected).push_back(std::move(c));
  std::stable_sort(valid.begin(), valid.end(),
                   [](const LayoutCost& a, const LayoutCost& b) { return a.step_s() < b.step_s(); });
  valid.insert(valid.end(), rejected.begin(), rejected.end());
  return valid;
}

}  // namespace loom::plan
