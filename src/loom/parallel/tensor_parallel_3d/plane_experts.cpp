#include "loom/parallel/tensor_parallel_3d/plane_experts.hpp"

#include <algorithm>

#include "loom/comm/activation_wire.hpp"
#include "loom/comm/startup_watch.hpp"
#include "loom/error.hpp"

namespace loom::parallel::tp3d {

namespace {
// The first row of plane rank q's experts in rows grouped by expert.
int64_t first_row(const nn::DispatchPlan& plan, int64_t q) {
  int64_t r = 0;
  for (int64_t s = 0; s < q; ++s) r += plan.send[static_cast<size_t>(s)];
  return r;
}
}  // namespace

std::vector<int64_t> PlaneExperts::exchange_counts(const std::vector<int64_t>& counts, int64_t local_experts) const {
  const int64_t E = static_cast<int64_t>(counts.size()), q = plane_.rank();
  check(E == local_experts * plane_.size(), "experts over the grid's plane: ", E, " expert counts for ", local_experts,
        " experts on each of ", plane_.size(), " ranks");
  std::vector<int64_t> from(static_cast<size_t>(E), 0);
  for (int64_t e = q * local_experts; e < (q + 1) * local_experts; ++e)
    from[static_cast<size_t>(e)] = counts[static_cast<size_t>(e)];  // block q: from rank q itself
  return from;
}

Tensor PlaneExperts::dispatch(const Tensor& rows, const nn::DispatchPlan& plan) const {
  const int64_t C = rows.size(1), begin = first_row(plan, plane_.rank()), n = plan.received();
  Tensor mine = Tensor::empty({n, C});  // (received, C)
  std::copy_n(rows.f32() + begin * C, n * C, mine.f32());
  return mine;
}

Tensor PlaneExperts::combine(const Tensor& rows, const nn::DispatchPlan& plan) const {
  const ExchangeClock clock(*this);
  const int64_t C = rows.size(1);
  std::vector<int64_t> counts = plan.send;  // rank q's experts' rows
  int64_t total = 0;
  for (int64_t& c : counts) total += c, c *= C;
  Tensor all = Tensor::empty({total, C});  // (R, C)
  comm::stop_for_a_test("plane-experts-gather");
  comm::all_gather_v_activations(plane_, rows, counts, all);
  return all;
}

void PlaneExperts::max_and_sum_over_ranks(std::vector<float>& most, std::vector<float>& total) const {
  if (most.empty()) return;  // every rank ran the same forwards: none on each
  statistics_.all_reduce(most.data(), static_cast<int64_t>(most.size()), comm::ReduceOp::Max);
  statistics_.all_reduce(total.data(), static_cast<int64_t>(total.size()), comm::ReduceOp::Sum);
}

}  // namespace loom::parallel::tp3d
