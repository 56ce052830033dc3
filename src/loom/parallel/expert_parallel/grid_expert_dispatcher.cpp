#include "loom/parallel/expert_parallel/grid_expert_dispatcher.hpp"

#include "loom/error.hpp"

namespace loom::parallel::ep {

namespace {
// Elements [q n, (q + 1) n) of v: plane block q's experts.
std::vector<int64_t> block(const std::vector<int64_t>& v, int64_t q, int64_t n) {
  return {v.begin() + q * n, v.begin() + (q + 1) * n};
}
}  // namespace

std::vector<int64_t> GridExpertDispatcher::exchange_counts(const std::vector<int64_t>& counts, int64_t local_experts) const {
  const ExchangeClock clock(*this);
  const int64_t E = static_cast<int64_t>(counts.size()), P = plane_.ranks(), q = plane_.rank();
  check(E == local_experts * ranks(), "experts over a grid's plane and ep: ", E, " expert counts for ", local_experts,
        " experts on each of ", P, " x ", ep_.ranks(), " ranks");
  // Blocks q ep + r' hold plane block q's experts; only the ep ranks at this plane position
  // (the same q) send to this rank, so every other block is zero.
  const std::vector<int64_t> from_block = ep_.exchange_counts(block(counts, q, E / P), local_experts);
  std::vector<int64_t> from(static_cast<size_t>(E), 0);
  std::copy(from_block.begin(), from_block.end(), from.begin() + q * (E / P));
  return from;
}

nn::DispatchPlan GridExpertDispatcher::plane_plan(const nn::DispatchPlan& plan) const {
  const int64_t P = plane_.ranks(), E = static_cast<int64_t>(plan.counts.size());
  return nn::make_plan(plan.counts, plane_.exchange_counts(plan.counts, E / P), P);
}

nn::DispatchPlan GridExpertDispatcher::ep_plan(const nn::DispatchPlan& plan) const {
  const int64_t P = plane_.ranks(), q = plane_.rank(), n = static_cast<int64_t>(plan.counts.size()) / P;
  return nn::make_plan(block(plan.counts, q, n), block(plan.from, q, n), ep_.ranks());
}

Tensor GridExpertDispatcher::dispatch(const Tensor& rows, const nn::DispatchPlan& plan) const {
  const ExchangeClock clock(*this);
  return ep_.dispatch(plane_.dispatch(rows, plane_plan(plan)), ep_plan(plan));
}

Tensor GridExpertDispatcher::combine(const Tensor& rows, const nn::DispatchPlan& plan) const {
  const ExchangeClock clock(*this);
  return plane_.combine(ep_.combine(rows, ep_plan(plan)), plane_plan(plan));
}

void GridExpertDispatcher::max_and_sum_over_ranks(std::vector<float>& most, std::vector<float>& total) const {
  plane_.max_and_sum_over_ranks(most, total);
  ep_.max_and_sum_over_ranks(most, total);
}

}  // namespace loom::parallel::ep
