#include "loom/plan/layout_cost.hpp"

#include <algorithm>
#include <optional>

#include "loom/plan/memory_model.hpp"
#include "loom/plan/pipeline_ranks.hpp"
#include "loom/plan/rank_memory_terms.hpp"
#include "loom/plan/tensor_parallel_3d_layout.hpp"
#include "loom/plan/zero_gathered.hpp"
#include "loom/plan/moe_cost.hpp"
#include "loom/plan/mixed_precision_cost.hpp"

namespace loom::plan {

RankShape rank_shape(const ModelSpec& m, const ClusterSpec& c, const Layout& l) {
  return {.batch = l.micro_batch, .seq = m.seq, .hidden = m.hidden, .heads = m.heads, .vocab = m.vocab,
          .tp = l.tp, .cp = l.cp, .ep = l.ep, .sequence_parallel = l.sequence_parallel && l.tp > 1,
          .bf16 = c.precision == Precision::Bf16, .recompute = l.recompute, .selective = l.selective_recompute,
          .hidden_dropout = m.hidden_dropout > 0.0, .experts = m.moe.experts, .top_k = m.moe.top_k,
          .every = m.moe.every, .capacity_factor = m.moe.capacity_factor, .grid_row = l.row, .grid_col = l.col,
          .expert_split = plane_expert_split(m, l)};
}


int64_t device_state_bytes(const ModelSpec& model, const ClusterSpec& cluster, const Layout& l, const RankParameters& r) {
  const int zero = l.dp > 1 ? l.zero : 0;
  if (cluster.precision != Precision::Mixed)
    return plan::rank_state_bytes(r, rank_shape(model, cluster, l), l.dp, zero, 8).total();
  const bool sharded_experts = r.experts > 0 && l.ep == 1 && zero >= 1;
  return published_mixed_state_bytes(r.dense + (sharded_experts ? r.experts : 0), l.dp, zero) +
         (sharded_experts ? 0 : unsharded_state_bytes(r.experts, 0).total());
}

namespace {

RankParameters without_experts(RankParameters r) {
  r.experts = r.expert_weights = 0;
  return r;
}

}  // namespace

int64_t published_mixed_state_bytes(int64_t params, int64_t n, int zero) {
  const int64_t state[] = {16 * params, 4 * params + 12 * params / n, 2 * params + 14 * params / n, 16 * params / n};
  return state[std::clamp(zero, 0, 3)];
}

int64_t model_state_bytes_per_device(const ModelSpec& model, const ClusterSpec& cluster, const Layout& l) {
  int64_t most = 0;
  for (const RankStages& s : rank_stages(model, l))
    most = std::max(most, device_state_bytes(model, cluster, l, rank_parameters_of(model, l, s)));
  return most;
}

int64_t zero_gathered_bytes_of_rank(RankShape shape, const std::vector<nn::GPTStage>& chunks, const BlockLinears& linears,
                                    const ClusterSpec& cluster, const Layout& l, int64_t micro_batches,
                                    const std::vector<parallel::pipeline::Action>* actions) {
  const int zero = l.dp > 1 ? l.zero : 0;
  if (zero < 2) return 0;
  shape.bf16 = cluster.precision != Precision::Fp32;  // ZeRO's bf16 gathers, as the trainer's bf16 run holds them
  return zero_gathered_bytes(zero_modules(shape, chunks, linears), l.dp, zero, micro_batches, actions,
                             !l.zero3_reshard_per_step);
}

double layer_activation_bytes(const ModelSpec& m, const ClusterSpec& c, const Layout& l, bool recompute) {
  if (c.precision != Precision::Mixed) {  // Loom's layer, as the memory check counts it
    RankShape shape = rank_shape(m, c, l);
    shape.recompute = recompute;
    return static_cast<double>(activation_terms(shape).block);
  }
  const double s = static_cast<double>(m.seq / l.cp), b = static_cast<double>(l.micro_batch),
               h = static_cast<double>(m.hidden), a = static_cast<double>(m.heads), t = static_cast<double>(l.tp);
  const bool sp = l.sequence_parallel && l.tp > 1;
  const double bpv = static_cast<double>(value_bytes(c.precision));
  if (recompute) return bpv * s * b * h / (sp ? t : 1.0);
  // Ring attention and selective recompute keep no probabilities: no 5as/h term.
  if (l.cp > 1 || l.selective_recompute) return s * b * h * (sp ? 34.0 / t : 10.0 + 24.0 / t);
  if (sp) return s * b * h * (34.0 + 5.0 * a * s / h) / t;
  return s * b * h * (10.0 + 24.0 / t + 5.0 * a * s / (h * t));
}

namespace {

// The activations pipeline rank r holds at once: in Loom's precisions what the memory check
// counts (rank_memory_terms.hpp); in mixed precision Korthikanti's layer for each block of each
// (micro-batch, chunk) pair its schedule holds, and recompute's re-run layer.
// `reaped`: every rank's sends' reaping (parallel::pipeline::sends_reaped), empty without a schedule.
int64_t rank_activation_bytes(const ModelSpec& model, const ClusterSpec& cluster, const Layout& l, const RankStages& s,
                              const std::optional<parallel::pipeline::Schedule>& schedule,
                              const std::vector<std::vector<size_t>>& reaped, size_t r) {
  const std::vector<parallel::pipeline::Action>* actions = schedule ? &schedule->ranks.at(r) : nullptr;
  const RankShape shape = rank_shape(model, cluster, l);
  if (cluster.precision != Precision::Mixed)
    return plan::loom_rank_activation_bytes(shape, s.chunks, actions, schedule ? &reaped.at(r) : nullptr);
  ActivationTerms mixed;
  mixed.block = static_cast<int64_t>(layer_activation_bytes(model, cluster, l, l.recompute));
  if (l.recompute) mixed.rerun = static_cast<int64_t>(layer_activation_bytes(model, cluster, l, false));
  // A mixture of experts keeps its routed rows' MLP activations, K per token, in place of the
  // dense MLP's (2-byte values): Loom's count of the difference, as in bf16 (Korthikanti's
  // layer has no term for it), kept per block or re-run under recompute.
  RankShape two_byte_values = shape;
  two_byte_values.bf16 = true;
  (l.recompute ? mixed.moe_rerun : mixed.moe_block) = moe_extra_activation_bytes(two_byte_values);
  return plan::rank_activation_bytes(shape, mixed, s.chunks, actions);
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
  const std::vector<RankStages> ranks = rank_stages(model, l);
  const std::optional<parallel::pipeline::Schedule> schedule = planned_schedule(l, m);
  // The schedule's order worked out once for all its ranks (Loom's precisions walk it).
  const std::vector<std::vector<size_t>> reaped = schedule && cluster.precision != Precision::Mixed
                                                      ? parallel::pipeline::sends_reaped(*schedule)
                                                      : std::vector<std::vector<size_t>>{};
  const RankShape shape = rank_shape(model, cluster, l);
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankParameters here = rank_parameters_of(model, l, ranks[r]);
    const int64_t dense = device_state_bytes(model, cluster, l, without_experts(here));
    const int64_t experts = device_state_bytes(model, cluster, l, here) - dense;
    // ZeRO-2/3's units held whole at once, walked through this rank's part of the schedule.
    const int64_t gathered = zero_gathered_bytes_of_rank(shape, ranks[r].chunks, tensor_parallel_linears(model.hidden, l.tp),
                                                         cluster, l, m, schedule ? &schedule->ranks.at(r) : nullptr);
    const int64_t activations = rank_activation_bytes(model, cluster, l, ranks[r], schedule, reaped, r);
    if (r == 0 || dense + experts + gathered + activations > c.memory_bytes()) {
      c.state_bytes = dense + experts + gathered;
      c.expert_state_bytes = experts;
      c.activation_bytes = activations;
    }
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

bool searches_selective_recompute(const Layout& l, Precision precision, const SearchSpace& space) {
  return selective_recompute_matters(l, precision) && (!l.recompute || space.selective_recompute.size() == 1);
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
          for (bool recompute : space.recompute)
            for (bool selective : space.selective_recompute) {
              Layout l{devices / (cp * tp * pp), pp, tp, chunks, mb, space.zero, recompute,
                       space.sequence_parallel && tp > 1};
              l.cp = cp;
              l.bucket_bytes = space.bucket_bytes;
              l.selective_recompute = selective;
              l.zero3_reshard_per_step = space.zero3_reshard_per_step;
              if (selective && !searches_selective_recompute(l, cluster.precision, space)) continue;
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
