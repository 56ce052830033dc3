#include "loom/nn/expert_dispatch.hpp"

#include "loom/error.hpp"

namespace loom::nn {

int64_t DispatchPlan::received() const {
  int64_t n = 0;
  for (int64_t c : local_counts) n += c;
  return n;
}

DispatchPlan make_plan(std::vector<int64_t> counts, std::vector<int64_t> from, int64_t ranks) {
  const int64_t E = static_cast<int64_t>(counts.size());
  check(ranks >= 1 && E % ranks == 0 && static_cast<int64_t>(from.size()) == E,
        "dispatch plan: ", E, " experts over ", ranks, " ranks");
  DispatchPlan p;
  p.ranks = ranks;
  p.local_experts = E / ranks;
  p.counts = std::move(counts);
  p.from = std::move(from);
  p.send.assign(static_cast<size_t>(ranks), 0);
  p.recv.assign(static_cast<size_t>(ranks), 0);
  p.local_counts.assign(static_cast<size_t>(p.local_experts), 0);
  for (int64_t q = 0; q < ranks; ++q)
    for (int64_t le = 0; le < p.local_experts; ++le) {
      const size_t i = static_cast<size_t>(q * p.local_experts + le);
      p.send[static_cast<size_t>(q)] += p.counts[i];  // experts of rank q are contiguous
      p.recv[static_cast<size_t>(q)] += p.from[i];
      p.local_counts[static_cast<size_t>(le)] += p.from[i];
    }
  return p;
}

Tensor ExpertDispatcher::dispatch(const Tensor& rows, const DispatchPlan&) const { return rows; }
Tensor ExpertDispatcher::combine(const Tensor& rows, const DispatchPlan&) const { return rows; }

double ExpertDispatcher::take_exchange_seconds() const {
  const double s = exchange_seconds_;
  exchange_seconds_ = 0.0;
  return s;
}

const ExpertDispatcher& local_experts() {
  static const ExpertDispatcher serial;
  return serial;
}

}  // namespace loom::nn
