// A mixture-of-experts feed-forward layer (Shazeer et al. 2017; Switch Transformer, Fedus
// et al. 2021): a router (Linear(C, E) without bias, softmax) sends each token to its top-K
// experts, capacity may drop assignments (the token's residual carries it on), the expert
// MLPs run on their rows (experts.hpp), and the outputs are summed with the renormalised
// gate weights. The load-balancing loss adds its gradient to the router in backward.
// The dispatcher decides where experts live (expert_dispatch.hpp): the layer is the same
// serially and under expert parallelism. Generation routes each new token alone
// (forward_tokens): the same routing, gates and experts, for a layer that cannot drop only.
#pragma once

#include <string>

#include "loom/nn/experts.hpp"
#include "loom/nn/expert_dispatch.hpp"
#include "loom/nn/linear.hpp"
#include "loom/nn/moe_config.hpp"
#include "loom/nn/sequence_parts.hpp"

namespace loom::nn {

// What the last forwards routed, for the progress line and metrics (statistics, not
// activations: summed until taken).
struct MoeStats {
  std::vector<int64_t> load;  // (E) assignments kept per expert
  int64_t assignments = 0;    // K x tokens routed
  int64_t dropped = 0;        // of them over capacity
  double aux_loss_sum = 0.0;  // sum over forwards of the load-balancing loss (before the coefficient)
  int64_t forwards = 0;
  double exchange_seconds = 0.0;  // expert parallel: time in the token exchanges
  // With the experts over several ranks (ep, a 3D grid's plane): the rows this rank's experts
  // took in each forward, in order (every rank of the group runs the same forwards).
  std::vector<int64_t> rank_rows;
  const ExpertDispatcher* dispatcher = nullptr;  // the model's, set by take_moe_stats
  void add(const MoeStats& other);
  // max over mean of the experts' loads (1: perfectly balanced); 0 without assignments.
  double load_imbalance() const;
};

// The statistics of every mixture of experts in `model` since the last call, summed (the
// load per expert index over all MoE layers), reset. Empty when the model has none.
MoeStats take_moe_stats(Module& model);

// Collective over the ranks sharing the experts out (stats.dispatcher's): the busiest rank's
// rows over the mean rank's, each summed over the forwards in `stats` (every MoE layer of
// every micro-batch). Each forward's exchange waits for its busiest rank, so this is the
// experts' time on the critical path over their balanced time, what `loom plan
// --moe-rank-imbalance` takes. 0 where one rank holds every expert or nothing was routed.
double busiest_rank_over_mean(const MoeStats& stats);

class MoE : public Module {
 public:
  // parts: where each sequence lives (split over cp ranks under context parallelism).
  MoE(int64_t C, const MoeConfig& config, const ExpertDispatcher& dispatcher = local_experts(),
      const SequenceParts& parts = whole_sequences());
  Linear& router() { return *router_; }
  Experts& experts() { return *experts_; }
  const MoeConfig& config() const { return config_; }
  // The statistics since the last call, reset.
  MoeStats take_stats();
  const ExpertDispatcher& dispatcher() const { return dispatcher_; }

  // Inference (generation's cached forward): x (N, C) new tokens of any sequences -> (N, C),
  // each routed alone by forward's rule (top-k of the router's softmax, gates renormalised
  // over the chosen experts) through local experts; no statistics, no load-balancing loss,
  // no backward. Layers that cannot drop only: capacity is decided over a whole sequence (kv_cacheable).
  Tensor forward_tokens(const Tensor& x, Context& ctx);
  // Empty when forward_tokens gives every token what forward gives it within its sequence,
  // whatever the other tokens; else why not. With a capacity that can drop (0 < f < E / K) a
  // token's choices may be dropped for tokens after it, and the capacity grows with the
  // sequence's length; f >= E / K never drops (capacity_never_drops).
  std::string kv_cacheable() const;

 protected:
  Tensor forward_impl(const Tensor& x, Context& ctx) override;  // (B, T, C) -> (B, T, C)
  Tensor backward_impl(const Tensor& dy, Context& ctx) override;

 private:
  MoeConfig config_;
  const ExpertDispatcher& dispatcher_;
  const SequenceParts& parts_;
  Linear* router_;    // C -> E
  Experts* experts_;  // E / ep local experts
  MoeStats stats_;
};

}  // namespace loom::nn
