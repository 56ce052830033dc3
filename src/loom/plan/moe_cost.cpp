#include "loom/plan/moe_cost.hpp"

#include <algorithm>

#include "loom/nn/routing.hpp"
#include "loom/parallel/tensor_parallel_3d/layers_3d.hpp"
#include "loom/plan/pipeline_ranks.hpp"
#include "loom/plan/zero_gathered.hpp"

namespace loom::plan {

int64_t expert_mlp_parameters(int64_t hidden) { return 8 * hidden * hidden + 5 * hidden; }

int64_t moe_layers(const ModelSpec& model) {
  return model.moe.experts > 0 ? model.layers / model.moe.every : 0;
}

int64_t total_parameters(const ModelSpec& model) {
  const int64_t mlp = expert_mlp_parameters(model.hidden);
  return model.parameters() + moe_layers(model) * ((model.moe.experts - 1) * mlp + model.hidden * model.moe.experts);
}

int64_t active_parameters(const ModelSpec& model) {
  const int64_t mlp = expert_mlp_parameters(model.hidden);
  return model.parameters() + moe_layers(model) * ((model.moe.top_k - 1) * mlp + model.hidden * model.moe.experts);
}

namespace {

// The pipeline rank holding the most parameters but its experts (the first of a tie).
RankStages busiest_rank(const ModelSpec& model, const Layout& layout) {
  RankStages most;
  int64_t most_dense = -1;
  for (const RankStages& s : rank_stages(model, layout))
    if (const int64_t dense = rank_parameters_of(model, layout, s).dense; dense > most_dense) {
      most_dense = dense;
      most = s;
    }
  return most;
}

}  // namespace

int64_t dense_parameters_per_device(const ModelSpec& model, const Layout& layout) {
  return rank_parameters_of(model, layout, busiest_rank(model, layout)).dense;
}

int64_t root_parameters_per_device(const ModelSpec& model, const Layout& layout) {
  const RankStages s = busiest_rank(model, layout);
  return root_unit_parameters(model.vocab / layout.tp * model.hidden, model.seq * model.hidden, model.hidden,
                              s.embedding, s.head);
}

int64_t expert_parameters_per_device(const ModelSpec& model, const Layout& layout) {
  if (model.moe.experts == 0) return 0;
  const int64_t holders = layout.ep * plane_expert_split(model, layout);
  return moe_layers(model) / layout.pp * (model.moe.experts / holders) * expert_mlp_parameters(model.hidden);
}

bool experts_sharded_by_zero(const ModelSpec& model, const Layout& layout) {
  return model.moe.experts > 0 && layout.ep == 1 && layout.dp > 1 && layout.zero >= 1;
}

int64_t expert_gradient_bytes_per_step(const ModelSpec& model, const Layout& layout, int64_t value_bytes) {
  if (layout.dp / layout.ep <= 1 || experts_sharded_by_zero(model, layout)) return 0;
  return expert_parameters_per_device(model, layout) * value_bytes;
}

int64_t all_to_all_bytes_per_step(const ModelSpec& model, const Layout& layout, int64_t micro_batches,
                                  int64_t value_bytes) {
  if (model.moe.experts == 0 || layout.ep == 1) return 0;
  // On a grid each plane rank exchanges its slice of the routed rows (the rows of its block).
  const int64_t rows = layout.micro_batch * model.seq * model.moe.top_k / plane_expert_split(model, layout);
  return 4 * rows * model.hidden * value_bytes * (moe_layers(model) / layout.pp) * micro_batches;
}

double all_to_all_seconds(const ModelSpec& model, const Layout& layout, int64_t micro_batches, int64_t value_bytes,
                          const LinkCost& link) {
  const int64_t bytes = all_to_all_bytes_per_step(model, layout, micro_batches, value_bytes);
  if (bytes == 0) return 0.0;
  const double ep = static_cast<double>(layout.ep);
  const double exchanges = 4.0 * static_cast<double>(moe_layers(model) / layout.pp * micro_batches);
  return exchanges * (ep - 1.0) * link.alpha_s + static_cast<double>(bytes) * (ep - 1.0) / ep * link.beta_s_per_byte;
}

ExpertRows expert_rows(int64_t B, int64_t T, int64_t Tr, int64_t ep, int64_t experts, int64_t top_k,
                       double capacity_factor, bool skewed, int64_t plane) {
  const int64_t N = B * Tr, R = N * top_k;
  if (experts == 0 || ep * plane == 1) return {R, N};
  // A rank's El experts take rows of its ep group's ep N tokens (every plane rank routes the
  // same ones): plane ranks split the experts, the ep ranks the plane block's.
  const int64_t El = experts / (plane * ep);
  if (nn::capacity_never_drops(capacity_factor, top_k, experts)) {
    if (skewed) return {ep * N * std::min(top_k, El), ep * N};
    return {(R + plane - 1) / plane, N};  // the balanced share
  }
  const int64_t per_sequence = std::min(nn::expert_capacity(capacity_factor, top_k, T, experts), Tr);
  return {std::min(El * ep * B * per_sequence, ep * R), std::min(ep * B * per_sequence, ep * N)};
}

double skewed_rows_over_balanced(int64_t experts, int64_t top_k, int64_t ep) {
  return static_cast<double>(std::min(experts, ep * top_k)) / static_cast<double>(top_k);
}

int64_t moe_activation_bytes_per_layer(int64_t B, int64_t T, int64_t C, int64_t t, bool sequence_parallel, int64_t cp,
                                       int64_t experts, int64_t top_k, bool bf16, int64_t ep, double capacity_factor,
                                       bool skewed, int64_t plane) {
  const int64_t sequence = T;                         // capacity is decided over the whole sequence
  if (cp > 1) T /= cp;                                // this rank's tokens
  const int64_t Tr = sequence_parallel ? T / t : T;  // tokens routed here (and of the MLP's input)
  const int64_t w = bf16 ? 2 : 4, N = B * Tr, R = N * top_k;
  const int64_t held = expert_rows(B, sequence, Tr, ep, experts, top_k, capacity_factor, skewed, plane).rank;
  return 4 * N * C + 4 * N * experts + 3 * 4 * R + 2 * 4 * experts + w * (R + 9 * held) * C;
}

int64_t moe_extra_activation_bytes_per_layer(int64_t B, int64_t T, int64_t C, int64_t t, bool sequence_parallel,
                                             int64_t cp, int64_t experts, int64_t top_k, bool bf16, int64_t ep,
                                             double capacity_factor, bool skewed) {
  const int64_t moe = moe_activation_bytes_per_layer(B, T, C, t, sequence_parallel, cp, experts, top_k, bf16, ep,
                                                     capacity_factor, skewed);
  if (cp > 1) T /= cp;
  const int64_t Tr = sequence_parallel ? T / t : T, w = bf16 ? 2 : 4;
  const int64_t dense_mlp = w * (B * Tr * C + 8 * B * T * C / t);
  return moe - dense_mlp;
}

int64_t moe_backward_working_bytes(int64_t B, int64_t T, int64_t C, int64_t t, bool sequence_parallel, int64_t cp,
                                   int64_t ep, int64_t top_k, bool bf16, int64_t experts, double capacity_factor,
                                   bool skewed, int64_t plane) {
  const int64_t sequence = T;
  if (cp > 1) T /= cp;
  const int64_t Tr = sequence_parallel ? T / t : T, N = B * Tr, R = N * top_k;
  const ExpertRows held = expert_rows(B, sequence, Tr, ep, experts, top_k, capacity_factor, skewed, plane);
  const int64_t fp32 = 4 * R * C + 4 * R + 4 * held.rank * C + 4 * held.rank * 4 * C;  // drows, dgate, dx, dh
  // ep: the rows' gradient as exchanged; a grid's plane: the held rows' slice copied out, and
  // every row's input gradient gathered back. Under ep on a grid the ep exchange's buffers are
  // gone by the plane's gather, which holds the most.
  const int64_t exchanged = plane > 1 ? 4 * held.rank * C + 4 * R * C : ep > 1 ? 4 * held.rank * C : 0;
  return fp32 + exchanged + (bf16 ? 4 * R * C + 2 * held.rank * C + 2 * held.one_expert * 4 * C : 0);
}

namespace {
// The dense model's flops per sequence plus, per MoE layer, `copies` x (K expert MLPs and a
// router) in place of one MLP (48 s h^2 forward and backward), the experts' part `wait` times
// over (the busiest rank's rows over the mean's, where ranks share the experts out).
double moe_ratio(const ModelSpec& model, double copies, double wait = 1.0) {
  if (model.moe.experts == 0) return 1.0;
  const double s = static_cast<double>(model.seq), h = static_cast<double>(model.hidden);
  const double K = static_cast<double>(model.moe.top_k), E = static_cast<double>(model.moe.experts);
  const double extra =
      static_cast<double>(moe_layers(model)) * ((K * copies * wait - 1.0) * 48.0 * s * h * h + copies * 6.0 * s * h * E);
  return 1.0 + extra / model.flops_per_sequence(false);
}
}  // namespace

double moe_flops_ratio(const ModelSpec& model) { return moe_ratio(model, 1.0); }

double moe_compute_ratio(const ModelSpec& model, const Layout& layout) {
  if (layout.tensor_parallel_3d() && model.moe.experts > 0 && plane_expert_split(model, layout) == 1)
    return moe_ratio(model, static_cast<double>(layout.row * layout.col));
  const bool replicated = layout.tp > 1 && !layout.sequence_parallel;
  const bool shared_out = layout.ep > 1 || plane_expert_split(model, layout) > 1;
  return moe_ratio(model, replicated ? static_cast<double>(layout.tp) : 1.0, shared_out ? model.moe.rank_imbalance : 1.0);
}

int64_t plane_expert_split(const ModelSpec& model, const Layout& layout) {
  if (!layout.tensor_parallel_3d() || model.moe.experts == 0) return 1;
  return parallel::tp3d::Layers3D::expert_split(model.moe.experts, {layout.row, layout.col, layout.depth});
}

double moe_layer_collective_share(const ModelSpec& model) {
  return model.moe.experts == 0 ? 1.0 : 1.0 - 0.5 * static_cast<double>(moe_layers(model)) / static_cast<double>(model.layers);
}

int64_t moe_tensor_parallel_gradient_values(int64_t layers, int64_t hidden, int64_t experts, int64_t local_experts,
                                            int64_t renewed, bool expert_parallel) {
  const int64_t router = layers * hidden * experts, local = layers * local_experts * expert_mlp_parameters(hidden);
  return renewed * router + (expert_parallel ? 1 : renewed) * local;
}

int64_t moe_replicated_gradient_bytes(const ModelSpec& model, const Layout& layout, int64_t micro_batches) {
  if (model.moe.experts == 0 || layout.tp == 1 || !layout.sequence_parallel) return 0;
  const int64_t E = model.moe.experts;
  return 4 * moe_tensor_parallel_gradient_values(moe_layers(model) / layout.pp, model.hidden, E, E / layout.ep,
                                                 layout.zero >= 2 ? micro_batches : 1, layout.ep > 1);
}

}  // namespace loom::plan
