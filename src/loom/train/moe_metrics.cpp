#include "loom/train/moe_metrics.hpp"

#include <algorithm>

#include "loom/error.hpp"
#include "loom/nn/moe.hpp"

namespace loom::train {

MoeStepStats gather_moe_stats(nn::Module& model, int64_t experts, const std::vector<comm::ProcessGroup*>& groups) {
  const nn::MoeStats s = nn::take_moe_stats(model);
  // One buffer, summed in one all-reduce per group: loads, assignments, dropped, aux sum,
  // forwards. Its size is the model's, not this rank's layers' (a pipeline stage may hold no
  // MoE block, and then has no loads of its own).
  const size_t E = static_cast<size_t>(experts);
  check(s.load.empty() || s.load.size() == E, "MoE statistics of ", s.load.size(), " experts, the model has ", E);
  std::vector<float> sums(E + 4, 0.0f);
  for (size_t e = 0; e < s.load.size(); ++e) sums[e] = static_cast<float>(s.load[e]);
  sums[E] = static_cast<float>(s.assignments);
  sums[E + 1] = static_cast<float>(s.dropped);
  sums[E + 2] = static_cast<float>(s.aux_loss_sum);
  sums[E + 3] = static_cast<float>(s.forwards);
  for (comm::ProcessGroup* g : groups)
    if (g->size() > 1) g->all_reduce(sums.data(), static_cast<int64_t>(sums.size()), comm::ReduceOp::Sum);
  MoeStepStats out;
  out.present = true;
  double kept = 0.0, most = 0.0;
  for (size_t e = 0; e < E; ++e) kept += sums[e], most = std::max(most, static_cast<double>(sums[e]));
  for (size_t e = 0; e < E; ++e) out.load.push_back(kept > 0 ? sums[e] / kept : 0.0);
  out.load_imbalance = kept > 0 ? most * static_cast<double>(E) / kept : 0.0;
  out.dropped_fraction = sums[E] > 0 ? sums[E + 1] / sums[E] : 0.0;
  out.aux_loss = sums[E + 3] > 0 ? sums[E + 2] / sums[E + 3] : 0.0;
  out.exchange_seconds = s.exchange_seconds;
  out.rank_imbalance = nn::busiest_rank_over_mean(s);
  return out;
}

}  // namespace loom::train
