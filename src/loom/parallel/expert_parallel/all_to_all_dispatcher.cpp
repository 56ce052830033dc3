#include "loom/parallel/expert_parallel/all_to_all_dispatcher.hpp"

#include <algorithm>

#include "loom/comm/activation_wire.hpp"
#include "loom/comm/startup_watch.hpp"
#include "loom/error.hpp"

namespace loom::parallel::ep {

namespace {

// Received rows arrive by sending rank, each rank's grouped by local expert; the experts
// want them grouped by local expert. by_expert: (source, expert) blocks -> (expert, source).
Tensor regroup(const Tensor& rows, const nn::DispatchPlan& plan, bool by_expert) {
  const int64_t C = rows.size(1), P = plan.ranks, El = plan.local_experts;
  Tensor out = Tensor::empty(rows.shape());  // (received, C)
  // Offsets of block (s, e) in source-major and in expert-major order.
  std::vector<int64_t> source_major(static_cast<size_t>(P * El)), expert_major(static_cast<size_t>(P * El));
  int64_t o = 0;
  for (int64_t s = 0; s < P; ++s)
    for (int64_t e = 0; e < El; ++e) source_major[static_cast<size_t>(s * El + e)] = o, o += plan.from[static_cast<size_t>(s * El + e)];
  o = 0;
  for (int64_t e = 0; e < El; ++e)
    for (int64_t s = 0; s < P; ++s) expert_major[static_cast<size_t>(s * El + e)] = o, o += plan.from[static_cast<size_t>(s * El + e)];
  for (size_t b = 0; b < plan.from.size(); ++b) {
    const int64_t src = by_expert ? source_major[b] : expert_major[b], dst = by_expert ? expert_major[b] : source_major[b];
    std::copy_n(rows.f32() + src * C, plan.from[b] * C, out.f32() + dst * C);
  }
  return out;
}

std::vector<int64_t> times(std::vector<int64_t> counts, int64_t C) {
  for (int64_t& c : counts) c *= C;
  return counts;
}

}  // namespace

std::vector<int64_t> AllToAllDispatcher::exchange_counts(const std::vector<int64_t>& counts, int64_t local_experts) const {
  const ExchangeClock clock(*this);
  // counts (E): block q (rank q's experts) goes to rank q; from (E): block s came from rank s.
  const int64_t E = static_cast<int64_t>(counts.size());
  check(E == local_experts * ep_.size(), "expert parallel: ", E, " expert counts for ", local_experts, " experts on each of ",
        ep_.size(), " ranks");
  Tensor send = Tensor::empty({E}, DType::F32, MemoryCategory::CommBuffers), recv = Tensor::empty({E}, DType::F32, MemoryCategory::CommBuffers);
  for (int64_t e = 0; e < E; ++e) {
    check(counts[static_cast<size_t>(e)] < (int64_t{1} << 24), "expert parallel: ", counts[static_cast<size_t>(e)],
          " rows for one expert exceed what the count exchange carries exactly (2^24)");
    send.f32()[e] = static_cast<float>(counts[static_cast<size_t>(e)]);
  }
  comm::stop_for_a_test("ep-all-to-all");
  ep_.all_to_all(send, recv);  // counts: exact in fp32 (below 2^24), never on the activation wire
  std::vector<int64_t> from(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) from[static_cast<size_t>(e)] = static_cast<int64_t>(recv.f32()[e]);
  return from;
}

Tensor AllToAllDispatcher::dispatch(const Tensor& rows, const nn::DispatchPlan& plan) const {
  const ExchangeClock clock(*this);
  const int64_t C = rows.size(1);
  Tensor received = Tensor::empty({plan.received(), C});  // (received, C) by sending rank
  comm::all_to_all_v_activations(ep_, rows, times(plan.send, C), received, times(plan.recv, C));
  Tensor out = regroup(received, plan, /*by_expert=*/true);
  return out;
}

Tensor AllToAllDispatcher::combine(const Tensor& rows, const nn::DispatchPlan& plan) const {
  const ExchangeClock clock(*this);
  const int64_t C = rows.size(1);
  int64_t sent = 0;
  for (int64_t c : plan.send) sent += c;
  Tensor back = Tensor::empty({sent, C});  // (R, C) in the order this rank sent them
  comm::all_to_all_v_activations(ep_, regroup(rows, plan, /*by_expert=*/false), times(plan.recv, C), back,
                                 times(plan.send, C));
  return back;
}

void AllToAllDispatcher::max_and_sum_over_ranks(std::vector<float>& most, std::vector<float>& total) const {
  if (most.empty()) return;  // every rank ran the same forwards: none on each
  statistics_.all_reduce(most.data(), static_cast<int64_t>(most.size()), comm::ReduceOp::Max);
  statistics_.all_reduce(total.data(), static_cast<int64_t>(total.size()), comm::ReduceOp::Sum);
}

}  // namespace loom::parallel::ep
