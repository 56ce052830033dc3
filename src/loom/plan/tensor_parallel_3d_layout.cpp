#include "loom/plan/tensor_parallel_3d_layout.hpp"

#include <algorithm>
#include <optional>

#include "loom/plan/context_parallel_cost.hpp"
#include "loom/plan/gemm_cost.hpp"
#include "loom/plan/gradient_overlap.hpp"
#include "loom/plan/layout_cost.hpp"
#include "loom/plan/memory_model.hpp"
#include "loom/plan/moe_cost.hpp"
#include "loom/plan/mixed_precision_cost.hpp"
#include "loom/plan/pipeline_ranks.hpp"
#include "loom/plan/rank_memory_terms.hpp"
#include "loom/plan/tensor_parallel_3d_cost.hpp"
#include "loom/plan/tensor_parallel_3d_memory.hpp"

namespace loom::plan {

namespace {

// Weight blocks Loom's overlap gathers ahead of the layer that uses them (Overlap3D::kAhead),
// and weight-gradient blocks it keeps in flight being reduce-scattered
// (Overlap3D::kGradientsInFlight); plan/ prices the run time's choice without depending on it.
constexpr double kGatheredAhead = 2.0;
constexpr double kGradientsInFlight = 2.0;
// Pieces of a layer's output rows, each summed over the input axis under the next one's GEMM
// (Linear3D::kOutputPieces).
constexpr double kOutputPieces = 4.0;

// A ring collective over p ranks: `buffer_passes` times (p - 1)/p of the bytes on the link
// (2 for an all-reduce of its buffer, 1 for an all-gather or reduce-scatter of the whole),
// and (p - 1) latencies per pass for each of `count` collectives.
double ring_seconds(double bytes, double buffer_passes, double count, int64_t p, const LinkCost& link) {
  if (p <= 1) return 0.0;
  const double q = static_cast<double>(p);
  return buffer_passes * ((q - 1.0) / q * bytes * link.beta_s_per_byte + count * (q - 1.0) * link.alpha_s);
}

// A grid rank's share of a block's Linears where the widths divide the grid: the weights over
// row x col x depth, qkv's and fc's biases with their output features over row, the
// projections' over col (Layers3D::share).
BlockLinears grid_linears(int64_t h, int64_t R, int64_t C, int64_t D) {
  return {.attention_weights = 4 * h * h / (R * C * D), .attention_biases = 3 * h / R + h / C,
          .mlp_weights = 8 * h * h / (R * C * D), .mlp_biases = 4 * h / R + h / C};
}

}  // namespace

LayoutCost predict_tensor_parallel_3d(const ModelSpec& m, const ClusterSpec& c, const Layout& l, int64_t global_batch) {
  LayoutCost cost;
  cost.layout = l;
  auto invalid = [&](std::string why) {
    cost.why_not = std::move(why);
    return cost;
  };
  const int64_t R = l.row, C = l.col, D = l.depth, h = m.hidden, G = R * C * D;
  const std::string grid = std::to_string(R) + "x" + std::to_string(C) + "x" + std::to_string(D);
  if (m.heads % R != 0) return invalid("heads: row " + std::to_string(R) + " does not divide the " + std::to_string(m.heads) + " heads");
  if (h % (R * D) != 0 || h % (C * D) != 0)
    return invalid("width: hidden " + std::to_string(h) + " does not split over grid " + grid);
  if (global_batch % (l.dp * D * l.micro_batch) != 0)
    return invalid("batch: dp x depth x micro-batch " + std::to_string(l.dp * D * l.micro_batch) +
                   " does not divide the global batch " + std::to_string(global_batch));
  if (l.cp > 1 && m.seq % (2 * l.cp) != 0)
    return invalid("sequence: 2 x cp " + std::to_string(2 * l.cp) + " does not divide the sequence of " +
                   std::to_string(m.seq) + " tokens");
  if (m.layers % (l.pp * l.chunks) != 0)
    return invalid("layers: pp x chunks " + std::to_string(l.pp * l.chunks) + " does not divide the " +
                   std::to_string(m.layers) + " layers");
  // Expert parallelism over the grids' replicas: each plane rank's block of the experts split
  // over ep, as the trainer requires (row x col x ep divides the experts).
  if (l.ep > 1 && (m.moe.experts == 0 || l.dp % l.ep != 0 || m.moe.experts % (R * C * l.ep) != 0))
    return invalid("experts: ep " + std::to_string(l.ep) + " must divide dp, and row x col x ep (" +
                   std::to_string(R * C * l.ep) + ") the " + std::to_string(m.moe.experts) + " experts");
  const int64_t micro_batches = global_batch / (l.dp * D * l.micro_batch);
  if (l.chunks > 1 && (l.pp == 1 || micro_batches % l.pp != 0))
    return invalid("interleaving: needs pp > 1 and the micro-batches (" + std::to_string(micro_batches) +
                   ") divisible by pp");
  cost.micro_batches = micro_batches;

  // Memory: the pipeline rank needing the most (the whole model without a pipeline): the model
  // state of its parameters, ZeRO-sharded over dp (each grid rank's shard sharded again), with
  // ZeRO's units held whole at once (zero_gathered.hpp) and, in Loom's precisions,
  // the activations the memory check counts for a grid rank over its schedule
  // (rank_memory_terms.hpp with the grid's axes: the trainer's peak); under mixed precision those
  // of a 1D tensor-parallel layer over row (heads and MLP split R ways, the rest replicated) a
  // block, plus the whole LM head's logits.
  const int64_t bpv = value_bytes(c.precision);
  const double s = static_cast<double>(m.seq), b = static_cast<double>(l.micro_batch), hd = static_cast<double>(h),
               a = static_cast<double>(m.heads), r = static_cast<double>(R);
  const double ring = static_cast<double>(l.cp), tokens = b * s / ring;  // this rank's (ring attention: 1/cp)
  const RankShape grid_rank = rank_shape(m, c, l);
  const BlockLinears linears = grid_linears(h, R, C, D);
  ActivationTerms mixed_terms;  // mixed precision's (rank_activation_bytes)
  if (c.precision == Precision::Mixed) {
    Layout over_row;  // the 1D tensor-parallel layer the activations are priced as
    over_row.tp = R;
    over_row.cp = l.cp;
    over_row.micro_batch = l.micro_batch;
    over_row.sequence_parallel = false;
    over_row.selective_recompute = l.selective_recompute;
    mixed_terms.block = static_cast<int64_t>(layer_activation_bytes(m, c, over_row, l.recompute));
    if (l.recompute) mixed_terms.rerun = static_cast<int64_t>(layer_activation_bytes(m, c, over_row, false));
    mixed_terms.head = static_cast<int64_t>(static_cast<double>(bpv) *
                                            (3.0 * tokens * hd + 2.0 * tokens * static_cast<double>(m.vocab)));
    // A mixture of experts' routed rows in place of the grid's MLP tensors, in 2-byte values
    // (Loom's bf16 count, as for 1D layouts), kept per block or re-run under recompute.
    RankShape two_byte_values = grid_rank;
    two_byte_values.bf16 = true;
    (l.recompute ? mixed_terms.moe_rerun : mixed_terms.moe_block) = moe_extra_activation_bytes(two_byte_values);
  }
  // The fp32 weight blocks gathered over depth, counted with the activations (transient too):
  // the layer's own, the next kAhead prefetched (parallel/tensor_parallel_3d/overlap_3d.hpp)
  // and in backward the weight-gradient blocks (this layer's, and the previous ones' still
  // being reduce-scattered), at the MLP's size, the largest block. Without a depth split
  // nothing is gathered (a rank's shard is its block).
  const double gathered_blocks = (D > 1 ? 1.0 + kGatheredAhead : 0.0) + 1.0 + kGradientsInFlight;
  const int64_t gathered = static_cast<int64_t>(4.0 * gathered_blocks * 4.0 * hd * hd / static_cast<double>(R * C));
  const std::vector<RankStages> stages = rank_stages(m, l);
  const std::optional<parallel::pipeline::Schedule> schedule = planned_schedule(l, micro_batches);
  const std::vector<std::vector<size_t>> reaped = schedule && c.precision != Precision::Mixed
                                                      ? parallel::pipeline::sends_reaped(*schedule)
                                                      : std::vector<std::vector<size_t>>{};
  const int zero = l.dp > 1 ? l.zero : 0;
  int64_t params = 0, dense = 0;  // the parameters of the pipeline rank needing the most, and those but its experts
  for (size_t k = 0; k < stages.size(); ++k) {
    const RankParameters here = rank_parameters(grid_rank, stages[k].chunks, linears);
    // Loom's bf16: 18 bytes a GEMM-read parameter (each weight shard's bf16 copy, which the depth
    // gather sends, and the token table's, beside the fp32 master, gradient and moments), 16 for
    // the biases, LayerNorms and position table no GEMM reads, as the memory check counts them
    // under ZeRO; mixed: the 16 of the literature, ZeRO's formulas.
    const int64_t state = device_state_bytes(m, c, l, here) +
                          zero_gathered_bytes_of_rank(grid_rank, stages[k].chunks, linears, c, l, micro_batches,
                                                      schedule ? &schedule->ranks.at(k) : nullptr);
    const std::vector<parallel::pipeline::Action>* actions = schedule ? &schedule->ranks.at(k) : nullptr;
    const int64_t activations =
        gathered + (c.precision == Precision::Mixed
                        ? plan::rank_activation_bytes(grid_rank, mixed_terms, stages[k].chunks, actions)
                        : loom_rank_activation_bytes(grid_rank, stages[k].chunks, actions, schedule ? &reaped.at(k) : nullptr));
    if (k == 0 || state + activations > cost.memory_bytes()) {
      cost.state_bytes = state;
      cost.activation_bytes = activations;
      params = here.dense + here.experts;
      dense = here.dense;
    }
  }
  const int64_t usable = c.memory_bytes - c.reserved_bytes;
  if (cost.memory_bytes() > usable)
    return invalid("out of memory: " + std::to_string(cost.memory_bytes() >> 20) + " MiB needed per device, " +
                   std::to_string(usable >> 20) + " MiB available");

  // Compute of one micro-batch: the four GEMMs on this rank's block, attention on heads / R
  // (under cp on this rank's 1/cp of the queries, as layer_time), the elementwise kernels
  // (LayerNorms and residuals on the whole width), the whole LM head; on this rank's tokens.
  const int64_t T = l.micro_batch * m.seq / l.cp;
  const LayerGemms gemms = layer_gemms(m, l);
  double forward = 0, backward = 0;
  for (const Gemm& g : gemms.linear) {
    forward += gemm_seconds(g, c, bpv);
    backward += gemm_backward_seconds(g, c, bpv);
  }
  const double linear_forward = forward;  // also what the dW GEMMs take (the same FLOPs)
  const Gemm &scores = gemms.scores, &context = gemms.context;
  const bool mixed = c.precision == Precision::Mixed;
  const double bw = c.memory_bandwidth;
  // Selective recompute runs QK^T and the softmax again in backward (as layer_time).
  const bool again = l.selective_recompute && selective_recompute_matters(l, c.precision);
  double attention_forward = 0, attention_backward = 0;
  if (const MeasuredRate* rate = find_rate(c.attention_rates, scores)) {
    attention_forward = 2.0 * scores.flops() / rate->forward / ring;
    attention_backward = 4.0 * scores.flops() / rate->backward / ring;
    backward += again ? scores.flops() / rate->forward : 0.0;
  } else {
    for (const Gemm& g : {scores, context}) {
      attention_forward += gemm_seconds(g, c, bpv) / ring;
      attention_backward += gemm_backward_seconds(g, c, bpv) / ring;
    }
    const double softmax = (mixed ? 9.0 : 8.0) * a * s / r * tokens / bw;
    attention_forward += softmax;
    attention_backward += 2.0 * softmax;
    backward += again ? gemm_seconds(scores, c, bpv) + softmax : 0.0;
  }
  forward += attention_forward;
  backward += attention_backward;
  const double norms = (mixed ? 22.0 : 40.0) * hd * tokens / bw;
  const double gelu_values = 4.0 * static_cast<double>(T * h / R), gelu_bytes = (mixed ? 16.0 : 32.0) * hd / r * tokens;
  forward += norms + std::max(gelu_bytes / bw, gelu_values * c.gelu_forward_s);
  backward += 2.0 * norms + std::max(2.0 * gelu_bytes / bw, gelu_values * c.gelu_backward_s);
  const double layer_s = (l.recompute ? 2.0 : 1.0) * forward + backward;
  const Gemm head = head_gemm(m, l);
  const double head_s = gemm_seconds(head, c, bpv) + gemm_backward_seconds(head, c, bpv) +
                        16.0 * static_cast<double>(T * m.vocab) / bw;
  // A pipeline rank runs its layers; the last stage, with the head, is the busiest and sets
  // the steady state (as step_time prices 1D pipelines).
  const double mb = static_cast<double>(micro_batches), p = static_cast<double>(l.pp), v = static_cast<double>(l.chunks);
  const double layers = static_cast<double>(m.layers) / p;
  // A mixture of experts: each plane rank its experts' rows, K per token shared out over the
  // plane (K times the grid's MLP share), priced by FLOPs as for 1D layouts.
  cost.time.compute_s = mb * (layers * layer_s + head_s) * moe_compute_ratio(m, l);

  // The grid's collectives: the counted bytes, activations and gathered weights at the
  // wire's size, gradients at the cluster's value size (Loom's bf16 reduces them in fp32).
  // Row and col mostly all-reduce (two passes of the buffer), depth all-gathers and
  // reduce-scatters (one). Ranks are laid out col fastest, then row, then depth: an axis
  // stays in a node while its span does. Recompute runs each forward's collectives again.
  // Under a pipeline a rank's blocks are its stage's; the depth mean of the tables is priced on
  // every stage (the end stages', which hold them, set the step).
  Gpt3DShape shape{.B = l.micro_batch, .T = m.seq / l.cp, .C = h, .L = m.layers / l.pp, .Vp = m.vocab,
                   .block_size = m.seq, .M = micro_batches, .moe_blocks = moe_layers(m) / l.pp,
                   .experts = m.moe.experts, .top_k = m.moe.top_k, .expert_split = plane_expert_split(m, l)};
  const Grid3DBytes bytes = tensor_parallel_3d_bytes_per_step(shape, R, C, D, wire_bytes(c.precision), bpv);
  const double scale = l.recompute ? 4.0 / 3.0 : 1.0;
  const double collectives = mb * layers;  // per axis, a few per layer and micro-batch
  auto link = [&](int64_t span) -> const LinkCost& { return span <= c.devices_per_node ? c.intra_node : c.inter_node; };
  const double depth_s = ring_seconds(scale * static_cast<double>(bytes.depth), 1.0, 12.0 * collectives, D, link(R * C * D));
  // Loom overlaps the depth all-gathers and reduce-scatters with the layers' compute
  // (tp_3d_overlap, on by default): only what exceeds that compute is exposed, the compute
  // as it runs here: on a CPU whose ranks share cores it lasts its dedicated time stretched
  // by the sharing, while a transfer on the link does not need the core. Row and col below.
  const double layers_s = mb * layers * layer_s;
  StepTime compute_only;
  compute_only.compute_s = cost.time.compute_s;
  const double stretch = compute_only.compute_s > 0
                             ? 1.0 + core_sharing_seconds(compute_only, l.dp * l.pp * l.cp * G, c) / compute_only.compute_s
                             : 1.0;
  const double depth_exposed_s = std::max(0.0, depth_s - layers_s * stretch);
  // Row and col: the forward's partial outputs are summed in kOutputPieces pieces, each under
  // the next piece's GEMM (all but the last piece's sum hide, under at most the pieces after
  // it); the backward's input-gradient sums and gathers run under the dW GEMM; the rest waits.
  const double axis_s[2] = {ring_seconds(scale * static_cast<double>(bytes.row), 2.0, 4.0 * collectives, R, link(R * C)),
                            ring_seconds(scale * static_cast<double>(bytes.col), 2.0, 6.0 * collectives, C, link(C))};
  const int64_t axis_bytes[2] = {bytes.row, bytes.col};
  double forward_sums_s = 0, under_weight_gradient_s = 0, waiting_s = 0;
  for (int axis : {0, 1}) {
    if (axis_bytes[axis] == 0) continue;
    const double per_byte = axis_s[axis] / static_cast<double>(axis_bytes[axis]);
    forward_sums_s += per_byte * static_cast<double>(bytes.forward_sums[axis]);
    under_weight_gradient_s += per_byte * static_cast<double>(bytes.under_weight_gradient[axis]);
    waiting_s += per_byte * static_cast<double>(axis_bytes[axis] - bytes.forward_sums[axis] -
                                                bytes.under_weight_gradient[axis]);
  }
  const double linears_s = mb * layers * linear_forward * stretch;  // the forward GEMMs as they run here
  const double forward_sums_exposed_s =
      std::max(forward_sums_s / kOutputPieces, forward_sums_s - (kOutputPieces - 1.0) / kOutputPieces * linears_s);
  const double under_weight_gradient_exposed_s = std::max(0.0, under_weight_gradient_s - linears_s);
  // A mixture of experts' gathers over the plane (each MoE layer's outputs in forward, input
  // gradients in backward) wait on the critical path.
  const double plane_s = ring_seconds((l.recompute ? 1.5 : 1.0) * static_cast<double>(bytes.plane), 1.0,
                                      (l.recompute ? 3.0 : 2.0) * mb * static_cast<double>(shape.moe_blocks), R * C,
                                      link(R * C));
  cost.time.tp_comm_s =
      waiting_s + forward_sums_exposed_s + under_weight_gradient_exposed_s + depth_exposed_s + plane_s;
  // What the compute hides still moves: on a CPU the ranks' cores copy it (their turns on
  // the cores count it; a GPU's copy engines and NICs leave it out).
  cost.time.overlapped_comm_s = depth_s - depth_exposed_s + forward_sums_s - forward_sums_exposed_s +
                                under_weight_gradient_s - under_weight_gradient_exposed_s;

  // Ring attention around the grids (context_parallel_cost.hpp, as step_time prices it for 1D
  // layouts): each grid rank's K/V, of its heads (C / R of the width), around the cp ranks of
  // its grid coordinates, G ranks apart; what attention's compute does not hide is exposed.
  if (l.cp > 1) {
    const LinkCost& ring_link = link(l.cp * G);
    const RingShape ring_shape{.B = l.micro_batch, .T = m.seq, .C = h, .tp = R, .value_bytes = wire_bytes(c.precision)};
    const double hop_s = ring_link.alpha_s + static_cast<double>(ring_hop_bytes(ring_shape, l.cp)) * ring_link.beta_s_per_byte;
    const RingTime ring_time = ring_layer_time(l.cp, hop_s, attention_forward, attention_backward);
    const double again_forward = l.recompute ? 2.0 : 1.0;
    cost.time.cp_comm_s = mb * layers * (again_forward * ring_time.forward_exposed_s + ring_time.backward_exposed_s);
    cost.time.cp_link_s = mb * layers * (again_forward * ring_time.forward_link_s + ring_time.backward_link_s);
  }

  // A pipeline of grids: fill and drain, (p - 1) / v stage-times of one micro-batch (its layers
  // and the grid's and the ring's exposed traffic), and each grid rank's stage output, its rows
  // with whole features, sent to the rank of the same grid coordinates on the next stage (and
  // its gradient back). A replica's pp x cp x G ranks are neighbours (the mesh's dp is outermost).
  if (l.pp > 1) {
    cost.time.bubble_s = (p - 1.0) / v * (layers * layer_s + (cost.time.tp_comm_s + cost.time.cp_comm_s) / mb);
    const LinkCost& stage_link = link(l.pp * l.cp * G);
    const double sent = static_cast<double>(T * h * wire_bytes(c.precision));
    cost.time.pp_comm_s = 2.0 * (mb * v + p - 1.0) * (stage_link.alpha_s + sent * stage_link.beta_s_per_byte);
  }

  // Data parallelism over this rank's gradients as the last backward readies them
  // (gradient_overlap.hpp, as step_time prices 1D layouts): the LM head's backward first, then
  // the blocks' (their weight blocks, the rest whole), the replicated embeddings last. Under a
  // pipeline the rank's stage: no head (the first stage, which ends the step, has none), and
  // with interleaved chunks (DDP) or ZeRO-1 everything reduced after it (reduces_after_pipeline). DDP all-reduces bucket by
  // bucket over dp x cp (each cp rank's gradients are its tokens'); ZeRO reduce-scatters unit
  // by unit over dp after a blocking mean over cp, and gathers the parameters back. A mixture
  // of experts' weights: ZeRO shards them with the rest without ep; under ep (and without ZeRO)
  // DDP's buckets reduce them over expert_dp (dp without ep) beside the dense reduction.
  if (l.dp * l.cp > 1) {
    const int64_t replicas = zero == 0 ? l.dp * l.cp : l.dp;
    const int64_t in_node = c.devices_per_node / std::min(G, c.devices_per_node);
    const int64_t per_node = std::max<int64_t>(1, std::min(replicas, in_node));
    auto all_reduce = [&](double bytes) { return hierarchical_all_reduce_seconds(bytes, replicas, per_node, c); };
    const double value = static_cast<double>(bpv);
    const double block = static_cast<double>(linears.attention_weights + linears.attention_biases + linears.mlp_weights +
                                             linears.mlp_biases + 4 * h);  // and its two LayerNorms
    GradientTimeline timeline;
    if (l.pp == 1) {
      timeline.first_s = gemm_backward_seconds(head, c, bpv);
      timeline.head = {hd * value, hd * value};
    }
    timeline.layers = m.layers / l.pp;
    timeline.layer_s = reduces_after_pipeline(l.pp, l.chunks, zero) ? 0.0 : backward + (l.recompute ? forward : 0.0);
    timeline.layer = block_gradients(h, G, block * value);
    timeline.embedding = {s * hd * value, static_cast<double>(m.vocab) * hd * value};
    double comm = 0, exposed = 0;
    if (zero >= 1 && l.cp > 1)  // the mean over cp in the gradients' hooks, on the compute thread
      comm = exposed = hierarchical_all_reduce_seconds(static_cast<double>(params) * value, l.cp,
                                                       std::min(l.cp, c.devices_per_node), c);
    const int64_t dp_per_node = std::max<int64_t>(1, std::min(l.dp, in_node));
    const DataParallelSeconds sync = data_parallel_seconds(
        {.zero = zero, .timeline = timeline, .bucket_bytes = static_cast<double>(l.bucket_bytes),
         .bytes = zero_bytes_per_step(m, l, micro_batches, dense, bpv, wire_bytes(c.precision)),
         .micro_batches = mb, .gathers = l.zero3_reshard_per_step ? 1.0 : mb * (l.recompute ? 3.0 : 2.0), .compute_s = cost.time.compute_s,
         .all_reduce = all_reduce,
         .gather_all_reduce = [&](double bytes) { return hierarchical_all_reduce_seconds(bytes, l.dp, dp_per_node, c); },
         .other = expert_gradient_buckets(m, l, c, timeline, bpv, per_node)});
    comm += sync.comm_s;
    exposed += sync.exposed_s;
    cost.time.dp_comm_s = exposed;
    cost.time.overlapped_comm_s += comm - exposed;  // the cores' copies, as in 1D
  }
  // Expert parallelism's all-to-alls over the ep ranks at the same grid coordinates (ep
  // neighbouring dp ranks: G x pp x cp ranks apart), each of a plane rank's slice of the rows.
  cost.time.ep_comm_s = all_to_all_seconds(m, l, micro_batches, wire_bytes(c.precision), link(l.ep * l.pp * l.cp * G));
  // AdamW over this rank's parameters, 1/dp of them under ZeRO (step_time's 36 bytes each), its
  // experts whole where ZeRO leaves them out (ep; experts_sharded_by_zero, as step_time).
  const int64_t whole = experts_sharded_by_zero(m, l) ? 0 : params - dense;
  cost.time.optimizer_s =
      36.0 * (static_cast<double>(params - whole) / (zero >= 1 ? static_cast<double>(l.dp) : 1.0) + static_cast<double>(whole)) / bw;
  cost.time.sharing_s = core_sharing_seconds(cost.time, l.dp * l.pp * l.cp * G, c);
  cost.flops_per_device = m.flops_per_sequence(l.recompute) * moe_flops_ratio(m) * static_cast<double>(global_batch) /
                          cost.step_s() / static_cast<double>(l.dp * l.pp * l.cp * G);
  cost.valid = true;
  return cost;
}

std::vector<LayoutCost> tensor_parallel_3d_layouts(const ModelSpec& m, const ClusterSpec& c, int64_t devices,
                                                   int64_t global_batch, const SearchSpace& space) {
  std::vector<LayoutCost> out;
  for (int64_t G = 2; G <= devices; ++G) {
    if (devices % G != 0) continue;
    for (int64_t R = 1; R <= G; ++R) {
      if (G % R != 0) continue;
      for (int64_t C = 1; C <= G / R; ++C) {
        if ((G / R) % C != 0) continue;
        for (int64_t cp : context_parallel_degrees(m, devices / G, space))
          for (int64_t pp = 1; pp <= devices / (cp * G); ++pp) {
            if ((devices / (cp * G)) % pp != 0) continue;
            for (int64_t chunks : space.chunks) {
              if (chunks > 1 && pp == 1) continue;
              for (int64_t mb : space.micro_batches)
                for (bool recompute : space.recompute)
                  for (bool selective : space.selective_recompute) {
                    Layout l{.dp = devices / (cp * pp * G), .pp = pp, .chunks = chunks, .micro_batch = mb, .zero = space.zero,
                             .recompute = recompute, .sequence_parallel = false, .row = R, .col = C,
                             .depth = G / (R * C), .cp = cp};
                    l.bucket_bytes = space.bucket_bytes;
                    l.selective_recompute = selective;
                    l.zero3_reshard_per_step = space.zero3_reshard_per_step;
                    if (selective && !searches_selective_recompute(l, c.precision, space)) continue;
                    // Expert parallelism over the grids' replicas: every ep the experts allow.
                    for (l.ep = 1; l.ep <= l.dp; ++l.ep) {
                      if (l.ep > 1 && (l.dp % l.ep != 0 || m.moe.experts % (R * C * l.ep) != 0)) continue;
                      out.push_back(predict_tensor_parallel_3d(m, c, l, global_batch));
                      if (m.moe.experts == 0) break;
                    }
                  }
            }
          }
      }
    }
  }
  return out;
}

BestOfEach best_of_each(const std::vector<LayoutCost>& ranked) {
  BestOfEach best;
  for (const LayoutCost& c : ranked) {
    if (!c.valid) continue;
    const LayoutCost*& slot = c.layout.tensor_parallel_3d() ? best.three_d : best.one_d;
    if (slot == nullptr || c.step_s() < slot->step_s()) slot = &c;
  }
  return best;
}

}  // namespace loom::plan
