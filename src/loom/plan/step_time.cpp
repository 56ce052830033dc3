#include "loom/plan/step_time.hpp"

#include <algorithm>

#include "loom/plan/context_parallel_cost.hpp"
#include "loom/plan/gemm_cost.hpp"
#include "loom/plan/gradient_overlap.hpp"
#include "loom/plan/moe_cost.hpp"

namespace loom::plan {

namespace {

const LinkCost& link_for(const ClusterSpec& c, bool inside_node) { return inside_node ? c.intra_node : c.inter_node; }

// A ring all-gather or reduce-scatter whose full tensor has `bytes` bytes: half a ring all-reduce.
double ring_half_seconds(double bytes, int64_t ranks, const LinkCost& link) {
  if (ranks <= 1) return 0.0;
  const double p = static_cast<double>(ranks);
  return (p - 1.0) * link.alpha_s + (p - 1.0) / p * bytes * link.beta_s_per_byte;
}

// Bytes the elementwise kernels of one layer's forward move per token, by kernel. Mixed
// precision counts Megatron's fused kernels on 2-byte values with 1-byte dropout masks: two
// LayerNorms (read + write h each) and two bias-dropout-residual adds (read 2h, write h +
// mask): 22h; bias-GeLU (read + write 4h / t): 16h / t; scale-mask-softmax (read + write
// a s / t) and its dropout (read, write, mask): 9as / t. Loom's fp32 layer has no dropout:
// LayerNorms 2 x 8h and residual adds 2 x 12h, GeLU 32h / t, softmax 8as / t. With sequence
// parallelism the LayerNorms and adds run on s / t tokens. Backward moves twice as much
// (saved inputs and incoming gradients in, gradients out).
struct ElementwiseBytes {
  double norms_and_adds = 0, gelu = 0, softmax = 0;
};

ElementwiseBytes elementwise_bytes_per_token(const ModelSpec& m, const ClusterSpec& c, const Layout& l) {
  const double h = static_cast<double>(m.hidden), a = static_cast<double>(m.heads), s = static_cast<double>(m.seq),
               t = static_cast<double>(l.tp);
  const double replicated = l.sequence_parallel && l.tp > 1 ? 1.0 / t : 1.0;
  if (c.precision == Precision::Mixed) return {22.0 * h * replicated, 16.0 * h / t, 9.0 * a * s / t};
  return {40.0 * h * replicated, 32.0 * h / t, 8.0 * a * s / t};
}

}  // namespace

LayerGemms layer_gemms(const ModelSpec& m, const Layout& l) {
  const int64_t T = l.micro_batch * m.seq / l.cp, h = m.hidden, t = l.tp, d = m.hidden / m.heads;
  if (l.tensor_parallel_3d()) {
    // A 3D grid: each linear layer's block of (out / R) x (in / C) or, for a pair's second
    // layer, (out / C) x (in / R); heads over row (parallel/tensor_parallel_3d).
    const int64_t R = l.row, C = l.col;
    return {{Gemm{T, 3 * h / R, h / C}, Gemm{T, h / C, h / R}, Gemm{T, 4 * h / R, h / C}, Gemm{T, h / C, 4 * h / R}},
            Gemm{m.seq, m.seq, d, l.micro_batch * m.heads / R},
            Gemm{m.seq, d, m.seq, l.micro_batch * m.heads / R}};
  }
  // (T, h) x (h, 3h/t) qkv, (T, h/t) x (h/t, h) projection, (T, h) x (h, 4h/t) and
  // (T, 4h/t) x (4h/t, h) MLP; per head (s, d) x (d, s) scores and (s, s) x (s, d) context.
  return {{Gemm{T, 3 * h / t, h}, Gemm{T, h, h / t}, Gemm{T, 4 * h / t, h}, Gemm{T, h, 4 * h / t}},
          Gemm{m.seq, m.seq, d, l.micro_batch * m.heads / t},
          Gemm{m.seq, d, m.seq, l.micro_batch * m.heads / t}};
}

Gemm head_gemm(const ModelSpec& m, const Layout& l) {
  // Under a 3D grid the tied head runs whole on every rank's rows.
  return Gemm{l.micro_batch * m.seq / l.cp, m.vocab / (l.tensor_parallel_3d() ? 1 : l.tp), m.hidden};
}

bool selective_recompute_matters(const Layout& l, Precision precision) {
  return l.cp == 1 && precision != Precision::Bf16;
}

LayerTime layer_time(const ModelSpec& m, const ClusterSpec& c, const Layout& l) {
  const int64_t bpv = value_bytes(c.precision);
  const int64_t T = l.micro_batch * m.seq / l.cp;  // this rank's tokens
  const LayerGemms gemms = layer_gemms(m, l);
  LayerTime lt;
  for (const Gemm& g : gemms.linear) {
    lt.forward_gemm += gemm_seconds(g, c, bpv);
    lt.backward_gemm += gemm_backward_seconds(g, c, bpv);
  }
  const ElementwiseBytes bytes = elementwise_bytes_per_token(m, c, l);
  const double tokens = static_cast<double>(T), bw = c.memory_bandwidth;
  // Attention measured as one kernel includes its softmax; otherwise its two products are
  // GEMMs and the softmax a memory-bound pass. Backward runs 4 products to forward's 2.
  // Under context parallelism a rank's queries are 1/cp of the sequence's (ring attention).
  const double cp = static_cast<double>(l.cp);
  if (const MeasuredRate* r = find_rate(c.attention_rates, gemms.scores)) {
    lt.attention_forward = 2.0 * gemms.scores.flops() / r->forward / cp;
    lt.attention_backward = 4.0 * gemms.scores.flops() / r->backward / cp;
    lt.forward_gemm += lt.attention_forward;
    lt.backward_gemm += lt.attention_backward;
  } else {
    for (const Gemm& g : {gemms.scores, gemms.context}) {
      lt.attention_forward += gemm_seconds(g, c, bpv) / cp;
      lt.attention_backward += gemm_backward_seconds(g, c, bpv) / cp;
    }
    lt.forward_gemm += lt.attention_forward;
    lt.backward_gemm += lt.attention_backward;
    lt.forward_elementwise += bytes.softmax * tokens / bw;
    lt.backward_elementwise += 2.0 * bytes.softmax * tokens / bw;
    lt.attention_forward += bytes.softmax * tokens / bw;
    lt.attention_backward += 2.0 * bytes.softmax * tokens / bw;
  }
  // Selective recompute runs QK^T and the softmax again in backward where the probabilities
  // would be kept: fp32 and mixed precision without context parallelism (Loom's bf16 and ring
  // attention recompute them anyway, already priced).
  if (l.selective_recompute && selective_recompute_matters(l, c.precision)) {
    const double again = find_rate(c.attention_rates, gemms.scores) != nullptr
                             ? lt.attention_forward / 2.0
                             : gemm_seconds(gemms.scores, c, bpv) + bytes.softmax * tokens / bw;
    lt.backward_gemm += again;
    lt.attention_backward += again;
  }
  lt.forward_elementwise += bytes.norms_and_adds * tokens / bw;
  lt.backward_elementwise += 2.0 * bytes.norms_and_adds * tokens / bw;
  // GELU: its bytes at the bandwidth or, where measured slower, its values at the measured rate.
  const double gelu_values = 4.0 * static_cast<double>(T * m.hidden / l.tp);
  lt.forward_elementwise += std::max(bytes.gelu * tokens / bw, gelu_values * c.gelu_forward_s);
  lt.backward_elementwise += std::max(2.0 * bytes.gelu * tokens / bw, gelu_values * c.gelu_backward_s);
  if (l.tp > 1) {
    // Each collective moves a (T, h) activation. Without sequence parallelism: an all-reduce
    // (two halves) after attention and MLP forward, before them backward (Shoeybi et al.
    // 2019). With it: 2 all-gathers + 2 reduce-scatters forward, backward the same plus
    // re-gathering the 2 column-parallel inputs (Korthikanti et al. 2022).
    const double one = ring_half_seconds(static_cast<double>(T * m.hidden * wire_bytes(c.precision)), l.tp,
                                         link_for(c, l.tp <= c.devices_per_node));
    lt.forward_tp = 4.0 * one;  // 2 all-reduces or 2 all-gathers + 2 reduce-scatters
    lt.backward_tp = (l.sequence_parallel ? 6.0 : 4.0) * one;
  }
  return lt;
}

double hierarchical_all_reduce_seconds(double bytes, int64_t ranks, int64_t per_node, const ClusterSpec& c) {
  if (ranks <= 1) return 0.0;
  per_node = std::clamp<int64_t>(per_node, 1, ranks);
  if (per_node == ranks) return 2.0 * ring_half_seconds(bytes, ranks, c.intra_node);
  const int64_t nodes = ranks / per_node;
  return 2.0 * ring_half_seconds(bytes, per_node, c.intra_node) +
         2.0 * ring_half_seconds(bytes / static_cast<double>(per_node), nodes, c.inter_node);
}

double core_sharing_seconds(const StepTime& dedicated, int64_t ranks, const ClusterSpec& c) {
  const int64_t on_node = std::min(ranks, c.devices_per_node);
  if (c.cores_per_node <= 0) return 0.0;
  if (on_node <= 1) return dedicated.total() / c.alone_core_speed - dedicated.total();
  // What keeps a rank's core busy: compute, optimizer and its share of communication
  // (shared-memory transfers are copies by the CPU, the hidden ones too; a wait for a slower
  // link is not); a pipeline's bubble is idle time that a rank waiting in MPI gives up to the
  // others (Open MPI's mpi_yield_when_idle).
  const double comm = dedicated.tp_comm_s + dedicated.pp_comm_s + dedicated.dp_comm_s + dedicated.cp_comm_s +
                      dedicated.overlapped_comm_s;
  const double busy = dedicated.compute_s + dedicated.optimizer_s + c.transfer_core_share * comm;
  const double turns = std::max(1.0, static_cast<double>(on_node) / static_cast<double>(c.cores_per_node));
  // Every core busy, each runs at the shared speed: the node's work over its cores, or the
  // dedicated step, whichever is longer, slowed by it.
  const double shared = std::max(turns * busy, dedicated.total()) / c.shared_core_speed;
  return std::max(0.0, shared - dedicated.total());
}

ZeroBytes zero_bytes_per_step(const ModelSpec& m, const Layout& l, int64_t micro_batches, int64_t params_per_device,
                              int64_t grad_bytes, int64_t gather_bytes) {
  if (l.dp <= 1 || l.zero < 1) return {};
  const int64_t sharded = params_per_device + (experts_sharded_by_zero(m, l) ? expert_parameters_per_device(m, l) : 0);
  // The root units' share of the device's parameters (a pipeline rank's own: the tables on the
  // first stage, the final LayerNorm and the table's copy on the last).
  const int64_t root = std::min(sharded, root_parameters_per_device(m, l));
  ZeroBytes z;
  z.reduced = (l.zero >= 2 ? micro_batches : 1) * sharded * grad_bytes;
  const int64_t block_gathers = l.recompute ? 3 : 2;
  // ZeRO-3 gathers each block before its forward and its backward (and its recompute) and a
  // root unit once a micro-batch, or every unit once a step; ZeRO-1/2 after the step.
  const bool once = l.zero < 3 || l.zero3_reshard_per_step;
  z.gathered = (once ? sharded : micro_batches * (block_gathers * (sharded - root) + root)) * gather_bytes;
  return z;
}

bool reduces_after_pipeline(int64_t pp, int64_t chunks, int zero) {
  return pp > 1 && (zero == 1 || (zero == 0 && chunks > 1));
}

DataParallelSeconds data_parallel_seconds(const DataParallelSync& s) {
  const double experts_s = total_seconds(s.other), backward_s = s.timeline.backward_s();
  DataParallelSeconds out;
  if (s.zero == 3) {
    // ZeRO-3 also gathers the parameters before each forward and backward, prefetched
    // under the compute of the previous unit: all of it hides under the step's compute,
    // but for what the other buckets leave past the end of backward.
    const double mb = s.micro_batches;
    const double sharded = mb * 0.5 * s.all_reduce(static_cast<double>(s.bytes.reduced) / mb) +
                           s.gathers * 0.5 * s.gather_all_reduce(static_cast<double>(s.bytes.gathered) / s.gathers);
    out.comm_s = sharded + experts_s;
    out.exposed_s = std::max({0.0, sharded + experts_s - s.compute_s, exposed_reduction_seconds(s.other, backward_s)});
    return out;
  }
  std::vector<ReadyReduction> reductions =
      s.zero == 0 ? ddp_buckets(s.timeline, s.bucket_bytes, s.all_reduce)
                  : zero_units(s.timeline, [&](double bytes) { return 0.5 * s.all_reduce(bytes); });
  const double one_backward = total_seconds(reductions);
  if (!s.other.empty()) {
    reductions.insert(reductions.end(), s.other.begin(), s.other.end());
    std::stable_sort(reductions.begin(), reductions.end(),
                     [](const ReadyReduction& a, const ReadyReduction& b) { return a.ready_s < b.ready_s; });
  }
  // ZeRO-2 reduce-scatters every micro-batch's gradients; the earlier ones' run under the
  // next micro-batches' compute.
  out.comm_s = (s.zero == 2 ? s.micro_batches : 1.0) * one_backward + experts_s;
  out.exposed_s = exposed_reduction_seconds(reductions, backward_s);
  if (s.zero >= 1) {
    // ZeRO-1/2 all-gather the updated parameters after the optimizer step, nothing to hide
    // them under (bf16 copies under mixed precision).
    const double gather = 0.5 * s.gather_all_reduce(static_cast<double>(s.bytes.gathered));
    out.comm_s += gather;
    out.exposed_s += gather;
  }
  return out;
}

std::vector<ReadyReduction> expert_gradient_buckets(const ModelSpec& m, const Layout& l, const ClusterSpec& c,
                                                    const GradientTimeline& timeline, int64_t value_bytes, int64_t per_node) {
  const int64_t expert_bytes = expert_gradient_bytes_per_step(m, l, value_bytes);
  if (expert_bytes == 0) return {};
  GradientTimeline experts = timeline;
  experts.head = experts.embedding = {};
  experts.layer = {static_cast<double>(expert_bytes) / static_cast<double>(std::max<int64_t>(1, timeline.layers))};
  experts.first_s -= experts.layer_s / 3.0;
  // Over interleaved chunks a bucket spans chunks whose last backwards lie apart: the experts'
  // DDP reduces once the pipeline is done, as DDP does (ZeRO-2/3's dense shards or not).
  if (l.pp > 1 && l.chunks > 1) {
    experts.first_s = timeline.backward_s();
    experts.layer_s = 0;
  }
  const int64_t expert_dp = l.dp / l.ep, expert_per_node = std::max<int64_t>(1, per_node / l.ep);
  return ddp_buckets(experts, static_cast<double>(l.bucket_bytes), [&](double b) {
    return hierarchical_all_reduce_seconds(b, expert_dp, expert_per_node, c);
  });
}

StepTime step_time(const ModelSpec& m, const ClusterSpec& c, const Layout& l, int64_t micro_batches,
                   int64_t params_per_device) {
  const int64_t bpv = value_bytes(c.precision);
  const double mb = static_cast<double>(micro_batches), p = static_cast<double>(l.pp),
               v = static_cast<double>(l.chunks);
  const double layers = static_cast<double>(m.layers) / p;  // per device, over its chunks
  const LayerTime lt = layer_time(m, c, l);
  const double re = l.recompute ? 1.0 : 0.0;  // full recompute runs each layer's forward again
  const double layer_compute = (1.0 + re) * (lt.forward_gemm + lt.forward_elementwise) + lt.backward_gemm +
                               lt.backward_elementwise;
  const double layer_tp = (1.0 + re) * lt.forward_tp + lt.backward_tp;

  // The LM head on the last stage: (T, h) x (h, V/t) forward and its two backward GEMMs, and
  // the cross-entropy over fp32 logits (write, read; gradient write, read: 16 bytes a logit).
  const int64_t T = l.micro_batch * m.seq / l.cp;  // this rank's tokens
  const Gemm head = head_gemm(m, l);
  const double head_s = gemm_seconds(head, c, bpv) + gemm_backward_seconds(head, c, bpv) +
                        16.0 * static_cast<double>(T * (m.vocab / l.tp)) / c.memory_bandwidth;

  // Outside the layers tp all-reduces a (T, h) activation twice more: the vocabulary-parallel
  // embedding's output (first stage) and the head's input gradient (last stage); the
  // vocabulary-parallel loss adds 3 all-reduces of a float per token (max, sum, target logit).
  double outside_tp = 0.0;
  if (l.tp > 1) {
    const LinkCost& link = link_for(c, l.tp <= c.devices_per_node);
    const double activation = static_cast<double>(T * m.hidden * wire_bytes(c.precision)),
                 per_token = static_cast<double>(T * 4);
    outside_tp = (l.pp == 1 ? 2.0 : 1.0) * 2.0 * ring_half_seconds(activation, l.tp, link) +
                 3.0 * 2.0 * ring_half_seconds(per_token, l.tp, link);
  }

  StepTime st;
  // The last stage is the busiest (its layers plus the head); it sets the steady state.
  const double stage_s = layers * (layer_compute + layer_tp);
  st.compute_s = mb * (layers * layer_compute + head_s);
  // A mixture of experts' MLP moves no tp activations; under sequence parallelism its
  // router's and experts' gradients are summed over tp (moe_cost.hpp).
  st.tp_comm_s = mb * (layers * layer_tp * moe_layer_collective_share(m) + outside_tp);
  if (const int64_t moe_sums = moe_replicated_gradient_bytes(m, l, micro_batches); moe_sums > 0)
    st.tp_comm_s += 2.0 * ring_half_seconds(static_cast<double>(moe_sums), l.tp, link_for(c, l.tp <= c.devices_per_node));
  // Fill and drain: (p - 1) / v stage-times of one micro-batch (Narayanan et al. 2021).
  st.bubble_s = (p - 1.0) / v * stage_s;
  if (l.cp > 1) {
    // The K/V ring of every layer (context_parallel_cost.hpp): cp ranks neighbour the tp ranks.
    const LinkCost& link = link_for(c, l.tp * l.cp <= c.devices_per_node);
    const RingShape shape{.B = l.micro_batch, .T = m.seq, .C = m.hidden, .tp = l.tp, .value_bytes = wire_bytes(c.precision)};
    const double hop_s = link.alpha_s + static_cast<double>(ring_hop_bytes(shape, l.cp)) * link.beta_s_per_byte;
    const RingTime ring = ring_layer_time(l.cp, hop_s, lt.attention_forward, lt.attention_backward);
    st.cp_comm_s = mb * layers * ((1.0 + re) * ring.forward_exposed_s + ring.backward_exposed_s);
    st.cp_link_s = mb * layers * ((1.0 + re) * ring.forward_link_s + ring.backward_link_s);
  }

  // Megatron orders ranks tp, dp, pp: stages are tp x dp devices apart.
  const bool pp_inside = l.tp * l.dp * l.pp <= c.devices_per_node;
  if (l.pp > 1) {
    const LinkCost& link = link_for(c, pp_inside);
    // Scattered over tp and gathered after (Narayanan et al. 2021, section 4.1).
    const double bytes = static_cast<double>(T * m.hidden * wire_bytes(c.precision)) / static_cast<double>(l.tp);
    st.pp_comm_s = 2.0 * (mb * v + p - 1.0) * (link.alpha_s + bytes * link.beta_s_per_byte);
  }

  const int zero = l.dp > 1 ? l.zero : 0;
  const int64_t dp_per_node = std::max<int64_t>(1, std::min(l.dp, c.devices_per_node / std::min(l.tp, c.devices_per_node)));
  // A mixture of experts' weights (moe_cost.hpp): without ep ZeRO shards them with the rest,
  // reduce-scatters and gathers included; under ep it leaves them whole to the experts' DDP.
  const int64_t experts_here = expert_parameters_per_device(m, l);
  const bool experts_in_zero = experts_sharded_by_zero(m, l);
  const int64_t sharded_params = params_per_device + (experts_in_zero ? experts_here : 0);
  const double grad_bytes = static_cast<double>(sharded_params * bpv);
  if (l.dp * l.cp > 1) {
    // DDP averages the gradients over dp x cp (the cp ranks saw different tokens), bucket by
    // bucket as the last micro-batch's backward readies them; ZeRO over dp, unit by unit,
    // after a blocking mean over cp in the gradients' hooks (gradient_overlap.hpp). Without a
    // pipeline the device's backward starts with the LM head's; with one the first stage sets
    // the end (its embeddings are ready last).
    const int64_t reducers = zero == 0 ? l.dp * l.cp : l.dp;
    const int64_t per_node = std::max<int64_t>(1, std::min(reducers, c.devices_per_node / std::min(l.tp, c.devices_per_node)));
    auto all_reduce = [&](double bytes) { return hierarchical_all_reduce_seconds(bytes, reducers, per_node, c); };
    const double h = static_cast<double>(m.hidden), t = static_cast<double>(l.tp), b = static_cast<double>(bpv);
    GradientTimeline timeline;
    timeline.layers = m.layers / l.pp;
    timeline.layer_s = lt.backward() + re * lt.forward();
    // A block's parameters (block_gradients), scaled to the device's parameters outside the
    // embeddings and final LayerNorm (a mixture of experts' router in place of the MLP).
    const double outside = (static_cast<double>(m.vocab + m.seq) * h + 2.0 * h) / (t * static_cast<double>(l.pp));
    const double per_layer =
        std::max(0.0, static_cast<double>(sharded_params) - outside) / static_cast<double>(std::max<int64_t>(1, timeline.layers));
    timeline.layer = block_gradients(m.hidden, l.tp, per_layer * b);
    timeline.embedding = {static_cast<double>(m.seq) * h * b, static_cast<double>(m.vocab) * h / t * b};  // wpe, wte
    if (l.pp == 1) {
      timeline.first_s = gemm_backward_seconds(head, c, bpv);
      timeline.head = {h * b, h * b};  // the final LayerNorm (the tied table is ready last)
    }
    // Interleaved chunks (DDP) and ZeRO-1 under a pipeline reduce once the pipeline is done:
    // everything is ready when the last backward ends.
    if (reduces_after_pipeline(l.pp, l.chunks, zero)) timeline.first_s = timeline.layer_s = 0;
    double comm = 0, exposed = 0;
    if (zero >= 1 && l.cp > 1) {
      // The mean over cp runs in the gradients' hooks, on the compute thread.
      comm = exposed = hierarchical_all_reduce_seconds(grad_bytes, l.cp, std::min(l.cp, c.devices_per_node), c);
    }
    // Under ep ZeRO leaves the experts out to DDP's buckets over expert_dp, sharing the link
    // with the dense reduction; without ep and ZeRO, DDP's buckets over dp likewise.
    const std::vector<ReadyReduction> expert_buckets = expert_gradient_buckets(m, l, c, timeline, bpv, per_node);
    const DataParallelSeconds sync = data_parallel_seconds(
        {.zero = zero, .timeline = timeline, .bucket_bytes = static_cast<double>(l.bucket_bytes),
         .bytes = zero_bytes_per_step(m, l, micro_batches, params_per_device, bpv, wire_bytes(c.precision)),
         .micro_batches = mb, .gathers = l.zero3_reshard_per_step ? 1.0 : mb * (2.0 + re), .compute_s = st.compute_s, .all_reduce = all_reduce,
         .gather_all_reduce = [&](double bytes) { return hierarchical_all_reduce_seconds(bytes, l.dp, dp_per_node, c); },
         .other = expert_buckets});
    comm += sync.comm_s;
    exposed += sync.exposed_s;
    st.dp_comm_s = exposed;
    st.overlapped_comm_s += comm - exposed;
  }
  // Adam reads gradient, master weight and two moments and writes the last three and the
  // working copy: 28 bytes a parameter in both precisions, memory-bound; clipping reads the
  // fp32 gradients once more for their norm and the next step zeroes them: 8 more. A mixture
  // of experts' E / ep experts a device holds are sharded with the rest under ep 1, whole under ep.
  const double sharded = static_cast<double>(sharded_params) / (zero >= 1 ? static_cast<double>(l.dp) : 1.0) +
                         static_cast<double>(experts_in_zero ? 0 : experts_here);
  st.optimizer_s = 36.0 * sharded / c.memory_bandwidth;
  st.sharing_s = core_sharing_seconds(st, l.dp * l.pp * l.tp * l.cp, c);
  return st;
}

}  // namespace loom::plan
