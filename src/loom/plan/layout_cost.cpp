#include "loom/plan/layout_cost.hpp"

#include <algorithm>

#include "loom/plan/memory_model.hpp"

namespace loom::plan {

namespace {

// Bytes of the 2-byte activations one layer keeps per micro-batch (Korthikanti et al. 2022,
// no dropout masks counted separately): sbh(34 + 5as/h) serially; with tensor parallelism
// sbh(10 + 24/t + 5as/(ht)); with sequence parallelism as well, sbh(34 + 5as/h)/t; with
// full recompute only the layer's input, 2sbh (split t ways with sequence parallelism).
double layer_activation_bytes(const ModelSpec& m, const Layout& l, bool recompute) {
  const double s = static_cast<double>(m.seq), b = static_cast<double>(l.micro_batch),
               h = static_cast<double>(m.hidden), a = static_cast<double>(m.heads), t = static_cast<double>(l.tp);
  const bool sp = l.sequence_parallel && l.tp > 1;
  if (recompute) return 2.0 * s * b * h / (sp ? t : 1.0);
  if (sp) return s * b * h * (34.0 + 5.0 * a * s / h) / t;
  return s * b * h * (10.0 + 24.0 / t + 5.0 * a * s / (h * t));
}

const LinkCost& link_for(const ClusterSpec& c, int64_t span) {
  return span <= c.devices_per_node ? c.intra_node : c.inter_node;
}

}  // namespace

LayoutCost predict(const ModelSpec& model, const ClusterSpec& cluster, const Layout& l, int64_t global_batch) {
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
  const int64_t m = global_batch / (l.dp * l.micro_batch);
  if (l.chunks > 1 && (l.pp == 1 || m % l.pp != 0))
    return invalid("interleaving: needs pp > 1 and the micro-batches (" + std::to_string(m) + ") divisible by pp");
  c.micro_batches = m;

  // Memory: model state (bf16 weights and gradients, fp32 master and moments: 2 + 2 + 12
  // bytes per parameter, ZeRO sharding the last over dp) and the first stage's activations.
  const int64_t params = model.parameters() / (l.tp * l.pp);
  const int zero = l.dp > 1 ? l.zero : 0;
  const int64_t n = l.dp;
  const int64_t state[] = {16 * params, 4 * params + 12 * params / n, 2 * params + 14 * params / n, 16 * params / n};
  c.state_bytes = state[std::clamp(zero, 0, 3)];
  const double layers = static_cast<double>(model.layers / l.pp);
  // In flight on stage 0: 1 without a pipeline, p under 1F1B, p (1 + (p-1)/(p v)) interleaved.
  double in_flight = 1.0;
  if (l.pp > 1) {
    const double p = static_cast<double>(l.pp), v = static_cast<double>(l.chunks);
    in_flight = std::min(static_cast<double>(m), l.chunks > 1 ? p * (1.0 + (p - 1.0) / (p * v)) : p);
  }
  double activations = layer_activation_bytes(model, l, l.recompute) * layers * in_flight;
  if (l.recompute) activations += layer_activation_bytes(model, l, false);  // one layer re-run at a time
  c.activation_bytes = static_cast<int64_t>(activations);
  if (c.memory_bytes() > cluster.memory_bytes)
    return invalid("out of memory: " + std::to_string(c.memory_bytes() >> 20) + " MiB needed per device, " +
                   std::to_string(cluster.memory_bytes >> 20) + " MiB available");

  // Time: compute at the GEMM efficiency, the pipeline bubble, and the communication of each
  // dimension on the link it crosses (tp innermost, then pp, then dp), none overlapped.
  const int64_t devices = l.dp * l.pp * l.tp;
  const double flops = model.flops_per_sequence(l.recompute) * static_cast<double>(global_batch);
  c.compute_s = flops / (static_cast<double>(devices) * cluster.peak_flops * cluster.gemm_efficiency);
  c.bubble_s = c.compute_s * static_cast<double>(l.pp - 1) / static_cast<double>(m * l.chunks);
  const double activation = 2.0 * static_cast<double>(l.micro_batch * model.seq * model.hidden);  // bytes
  if (l.tp > 1) {
    const double per_all_reduce = all_reduce_seconds("ring", static_cast<int64_t>(activation), static_cast<int>(l.tp),
                                                     link_for(cluster, l.tp));
    const double per_layer = l.recompute ? 6.0 : 4.0;  // 2 forward, 2 backward, 2 more re-running forward
    c.tp_comm_s = per_all_reduce * per_layer * layers * static_cast<double>(m);
  }
  if (l.pp > 1) {
    const LinkCost& link = link_for(cluster, l.tp * l.pp);
    const double bytes = activation / static_cast<double>(l.tp);  // scattered over tp (Megatron)
    c.pp_comm_s = 2.0 * static_cast<double>(m * l.chunks) * (link.alpha_s + bytes * link.beta_s_per_byte);
  }
  if (l.dp > 1)
    c.dp_comm_s = all_reduce_seconds("ring", 2 * params, static_cast<int>(l.dp), link_for(cluster, devices));
  c.flops_per_device = flops / c.step_s() / static_cast<double>(devices);
  c.valid = true;
  return c;
}

std::vector<LayoutCost> search(const ModelSpec& model, const ClusterSpec& cluster, int64_t devices,
                               int64_t global_batch) {
  std::vector<LayoutCost> valid, rejected;
  for (int64_t tp = 1; tp <= std::min(devices, cluster.devices_per_node); ++tp) {
    if (devices % tp != 0) continue;
    for (int64_t pp = 1; pp <= devices / tp; ++pp) {
      if ((devices / tp) % pp != 0) continue;
      for (int64_t mb : {1, 2, 4, 8})
        for (int64_t chunks : {1, 2}) {
          if (chunks > 1 && pp == 1) continue;
          for (bool recompute : {false, true}) {
            Layout l{devices / (tp * pp), pp, tp, chunks, mb, 1, recompute, tp > 1};
            LayoutCost c = predict(model, cluster, l, global_batch);
            (c.valid ? valid : rejected).push_back(c);
          }
        }
    }
  }
  std::stable_sort(valid.begin(), valid.end(), [](const LayoutCost& a, const LayoutCost& b) { return a.step_s() < b.step_s(); });
  valid.insert(valid.end(), rejected.begin(), rejected.end());
  return valid;
}

}  // namespace loom::plan
