#include "loom/nn/moe.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "loom/error.hpp"
#include "loom/nn/routing.hpp"
#include "loom/nn/saved_activation.hpp"

namespace loom::nn {

namespace {

// probs (N, E) = softmax of each row of logits.
Tensor softmax_rows(const Tensor& logits) {
  const int64_t N = logits.size(0), E = logits.size(1);
  Tensor probs = Tensor::empty({N, E});
  for (int64_t n = 0; n < N; ++n) {
    const float* l = logits.f32() + n * E;
    float* p = probs.f32() + n * E;
    float mx = l[0], sum = 0.0f;
    for (int64_t e = 1; e < E; ++e) mx = std::max(mx, l[e]);
    for (int64_t e = 0; e < E; ++e) sum += (p[e] = std::exp(l[e] - mx));
    for (int64_t e = 0; e < E; ++e) p[e] /= sum;
  }
  return probs;
}

// The plan's counts as a tensor a context can hold: (2E) i32, this rank's counts then `from`.
Tensor encode_plan(const DispatchPlan& plan) {
  const size_t E = plan.counts.size();
  Tensor t = Tensor::empty({static_cast<int64_t>(2 * E)}, DType::I32);
  for (size_t i = 0; i < E; ++i) {
    t.i32()[i] = static_cast<int32_t>(plan.counts[i]);
    t.i32()[E + i] = static_cast<int32_t>(plan.from[i]);
  }
  return t;
}

DispatchPlan decode_plan(const Tensor& t, int64_t ranks) {
  const int64_t E = t.numel() / 2;
  return make_plan(std::vector<int64_t>(t.i32(), t.i32() + E), std::vector<int64_t>(t.i32() + E, t.i32() + 2 * E), ranks);
}

// (R, C) each kept assignment's token of x (N, C), grouped by expert as routing numbered them.
Tensor gather_rows(const Tensor& x, const Routing& routing, int64_t K) {
  const int64_t N = routing.row.size(0), C = x.size(-1);
  const int32_t* row = routing.row.i32();
  Tensor rows = Tensor::empty({N * K - routing.dropped, C});  // (R, C)
  for (int64_t a = 0; a < N * K; ++a)
    if (row[a] >= 0) std::copy_n(x.f32() + (a / K) * C, C, rows.f32() + row[a] * C);
  return rows;
}

// y (N, C) += over each token's kept choices, in choice order, gate x its expert's output row.
void combine_rows(Tensor& y, const Tensor& outs, const Routing& routing, int64_t K) {
  const int64_t N = routing.row.size(0), C = y.size(-1);
  const int32_t* row = routing.row.i32();
  for (int64_t a = 0; a < N * K; ++a) {
    if (row[a] < 0) continue;
    const float g = routing.gate.f32()[a];
    const float* o = outs.f32() + row[a] * C;
    float* yn = y.f32() + (a / K) * C;
    for (int64_t c = 0; c < C; ++c) yn[c] += g * o[c];
  }
}

}  // namespace

void MoeStats::add(const MoeStats& other) {
  if (load.size() < other.load.size()) load.resize(other.load.size(), 0);
  for (size_t e = 0; e < other.load.size(); ++e) load[e] += other.load[e];
  assignments += other.assignments;
  dropped += other.dropped;
  aux_loss_sum += other.aux_loss_sum;
  forwards += other.forwards;
  exchange_seconds += other.exchange_seconds;
  rank_rows.insert(rank_rows.end(), other.rank_rows.begin(), other.rank_rows.end());
}

double MoeStats::load_imbalance() const {
  int64_t total = 0, most = 0;
  for (int64_t l : load) total += l, most = std::max(most, l);
  return total == 0 ? 0.0 : static_cast<double>(most) * static_cast<double>(load.size()) / static_cast<double>(total);
}

MoeStats take_moe_stats(Module& model) {
  MoeStats all;
  const ExpertDispatcher* dispatcher = nullptr;
  std::vector<Module*> todo{&model};
  while (!todo.empty()) {
    Module* m = todo.back();
    todo.pop_back();
    if (auto* moe = dynamic_cast<MoE*>(m)) {
      all.add(moe->take_stats());
      dispatcher = &moe->dispatcher();  // one per model: its clock covers every layer
    }
    for (Module* child : m->children()) todo.push_back(child);
  }
  if (dispatcher != nullptr) all.exchange_seconds = dispatcher->take_exchange_seconds();
  all.dispatcher = dispatcher;
  return all;
}

double busiest_rank_over_mean(const MoeStats& stats) {
  if (stats.dispatcher == nullptr || stats.dispatcher->ranks() == 1) return 0.0;
  std::vector<float> most(stats.rank_rows.begin(), stats.rank_rows.end()), total = most;
  stats.dispatcher->max_and_sum_over_ranks(most, total);
  double busiest = 0.0, all = 0.0;
  for (size_t f = 0; f < most.size(); ++f) busiest += most[f], all += total[f];
  return all > 0.0 ? busiest * static_cast<double>(stats.dispatcher->ranks()) / all : 0.0;
}

MoE::MoE(int64_t C, const MoeConfig& config, const ExpertDispatcher& dispatcher, const SequenceParts& parts)
    : config_(config), dispatcher_(dispatcher), parts_(parts) {
  config_.validate();
  const int64_t E = config_.experts, ep = dispatcher_.ranks();
  check(E % ep == 0, "moe_experts (", E, ") must be divisible by the expert-parallel degree ep (", ep, ")");
  router_ = &register_module("router", std::make_unique<Linear>(C, E, /*bias=*/false));
  // Top-k turns any rounding of the router's logits into another expert for tokens near a tie:
  // under mixed precision the router stays fp32, its weight and its GEMMs (as Megatron-LM's
  // --moe-router-dtype fp32 and DeepSpeed's gate), and sharded data parallelism gathers that
  // weight in fp32. It is C x E: its fp32 GEMMs cost E / (K x 8 C) of the experts' FLOPs.
  router_->weight().set_kept_in_fp32(true);
  experts_ = &register_module("experts", std::make_unique<Experts>(E / ep, C, dispatcher_.rank() * (E / ep), E));
}

MoeStats MoE::take_stats() {
  MoeStats s = std::move(stats_);
  stats_ = MoeStats{};
  return s;
}

Tensor MoE::forward_impl(const Tensor& x, Context& ctx) {
  check(x.ndim() == 3, "MoE expects (B, T, C), got ", shape_str(x.shape()));
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), N = B * T, K = config_.top_k;
  const Tensor logits = router_->forward(x, ctx);  // (B, T, E)
  const Tensor probs = softmax_rows(logits.view({N, config_.experts}));  // (N, E)
  Routing routing = route_tokens(probs, B, T, K, config_.capacity_factor, parts_);
  const Tensor rows = gather_rows(x, routing, K);  // (R, C)
  const DispatchPlan plan = make_plan(routing.counts, dispatcher_.exchange_counts(routing.counts, experts_->local_experts()),
                                      dispatcher_.ranks());
  const Tensor local = dispatcher_.dispatch(rows, plan);                                // (received, C)
  const Tensor outs = dispatcher_.combine(experts_->forward_grouped(local, plan.local_counts, ctx), plan);  // (R, C)

  Tensor y = Tensor::zeros({B, T, C});  // (B, T, C) sum over kept choices of gate x expert output
  combine_rows(y, outs, routing, K);
  MoeStats s;
  s.load = routing.counts;
  s.assignments = N * K;
  s.dropped = routing.dropped;
  s.aux_loss_sum = load_balancing_loss(probs, routing.expert, B, T, parts_);
  s.forwards = 1;
  if (dispatcher_.ranks() > 1) s.rank_rows.push_back(plan.received());
  stats_.add(s);
  // The experts' outputs are kept for the gates' gradient: as a bf16 copy under mixed
  // precision, like every activation a layer keeps (autocast's experts return them in bf16).
  ctx.save(this, {probs, routing.expert, routing.gate, routing.row, encode_plan(plan), saved_activation(outs, ctx)});
  return y;
}

std::string MoE::kv_cacheable() const {
  // A capacity that can never drop leaves every token its top-k, as dropless routing does:
  // the same per-token routing, so a cached token's output cannot change as the text grows.
  const int64_t E = config_.experts, K = config_.top_k;
  if (capacity_never_drops(config_.capacity_factor, K, E)) return "";
  std::ostringstream why;
  why << "its experts drop tokens over capacity (moe_capacity_factor " << config_.capacity_factor
      << ", below moe_experts / moe_top_k = " << static_cast<double>(E) / static_cast<double>(K)
      << ", from which none can drop), decided over each whole sequence: a token's choices may be dropped for "
         "tokens after it, and the capacity grows with the context, so earlier tokens' outputs change as the text "
         "grows and a KV cache cannot hold them";
  return why.str();
}

Tensor MoE::forward_tokens(const Tensor& x, Context& ctx) {
  check(x.ndim() == 2, "MoE::forward_tokens expects (N, C), got ", shape_str(x.shape()));
  const std::string why = kv_cacheable();
  check(why.empty(), "MoE '", name(), "' cannot route tokens one at a time: ", why);
  check(dispatcher_.ranks() == 1, "MoE::forward_tokens runs local experts, not experts sharded over ep (",
        dispatcher_.ranks(), ")");
  const int64_t N = x.size(0), C = x.size(1), K = config_.top_k;
  const Tensor probs = softmax_rows(router_->forward(x, ctx));  // (N, E)
  // Nothing can drop (kv_cacheable), so routing is per token and the N tokens may be taken as
  // one dropless sequence: a prefill groups its rows as forward groups the same prompt's.
  const Routing routing = route_tokens(probs, 1, N, K, 0.0);
  const Tensor outs = experts_->forward_grouped(gather_rows(x, routing, K), routing.counts, ctx);  // (R, C)
  Tensor y = Tensor::zeros({N, C});  // (N, C)
  combine_rows(y, outs, routing, K);
  return y;
}

Tensor MoE::backward_impl(const Tensor& dy, Context& ctx) {
  // Handles, not references: they outlive the release of this context's entry below.
  const Tensor probs = ctx.saved(this, 0), expert = ctx.saved(this, 1), gate = ctx.saved(this, 2),
               row_t = ctx.saved(this, 3), outs = widened(ctx.saved(this, 5));
  const DispatchPlan plan = decode_plan(ctx.saved(this, 4), dispatcher_.ranks());
  const int64_t B = dy.size(0), T = dy.size(1), C = dy.size(2), N = B * T, K = config_.top_k, R = outs.size(0);
  const int32_t* row = row_t.i32();

  // y[n] = sum_j g_j out_j: d out_j = g_j dy[n], d g_j = <dy[n], out_j>; a dropped choice has neither.
  Tensor drows = Tensor::empty({R, C});  // (R, C)
  Tensor dgate = Tensor::zeros({N, K});  // (N, K)
  for (int64_t a = 0; a < N * K; ++a) {
    if (row[a] < 0) continue;
    const float g = gate.f32()[a];
    const float *dyn = dy.f32() + (a / K) * C, *o = outs.f32() + row[a] * C;
    float* d = drows.f32() + row[a] * C;
    float dot = 0.0f;
    for (int64_t c = 0; c < C; ++c) d[c] = g * dyn[c], dot += dyn[c] * o[c];
    dgate.f32()[a] = dot;
  }
  // The exchanges in reverse: output gradients go to the experts as the rows did.
  const Tensor dlocal = experts_->backward_grouped(dispatcher_.dispatch(drows, plan), plan.local_counts, ctx);
  const Tensor dx_rows = dispatcher_.combine(dlocal, plan);  // (R, C)

  // Router: the gates' and the load-balancing loss's gradients, through the softmax.
  const int64_t E = config_.experts;
  Tensor dprobs = Tensor::zeros({N, E});  // (N, E)
  gate_backward(dprobs, probs, expert, gate, dgate);
  load_balancing_loss_backward(dprobs, expert, B, T,
                               static_cast<float>(config_.aux_loss_coef / static_cast<double>(config_.micro_batches)), parts_);
  // A gradient equal for every probability of a token moves no logit (they sum to 1): such a
  // row's is exactly zero, not the rounding of p (dp - dot). A top-1 router's only gradient,
  // the load-balancing loss's, is such a row when a sequence's loads are equal, and rounding
  // noise there differs between layouts while the true gradient is zero.
  Tensor dlogits = Tensor::empty({B, T, E});  // (B, T, E)
  for (int64_t n = 0; n < N; ++n) {
    const float *p = probs.f32() + n * E, *dp = dprobs.f32() + n * E;
    const bool common = std::all_of(dp + 1, dp + E, [&](float d) { return d == dp[0]; });
    float dot = 0.0f;
    for (int64_t e = 0; e < E; ++e) dot += dp[e] * p[e];
    for (int64_t e = 0; e < E; ++e) dlogits.f32()[n * E + e] = common ? 0.0f : p[e] * (dp[e] - dot);
  }
  ctx.release(this);
  Tensor dx = router_->backward(dlogits, ctx);  // (B, T, C)
  for (int64_t a = 0; a < N * K; ++a)
    if (row[a] >= 0) {
      const float* d = dx_rows.f32() + row[a] * C;
      float* dxn = dx.f32() + (a / K) * C;
      for (int64_t c = 0; c < C; ++c) dxn[c] += d[c];
    }
  return dx;
}

}  // namespace loom::nn
