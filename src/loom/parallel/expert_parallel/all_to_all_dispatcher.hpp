// Expert-parallel token dispatch (GShard; Megatron-LM's all-to-all token dispatcher,
// torchtitan's ExpertParallel): the E experts are split over the `ep` ranks in blocks of
// E/ep, and each MoE layer exchanges its routed rows with uneven all-to-alls. First the
// per-expert row counts (so every rank knows what it receives), then the rows, then (after
// the local experts) the outputs back with the splits swapped; the rows go in the ep group's
// activation dtype (comm/activation_wire.hpp: bf16 in a bf16 run), the counts in fp32. A
// rank that sends or receives nothing still takes part in every exchange, so no rank waits
// alone; every wait is watched by the group's watchdog (comm_timeout).
#pragma once

#include "loom/comm/process_group.hpp"
#include "loom/nn/expert_dispatch.hpp"

namespace loom::parallel::ep {

class AllToAllDispatcher : public nn::ExpertDispatcher {
 public:
  // statistics: a group over the same ranks for the routing statistics' reductions, so they
  // count in no layout group's traffic (null: ep itself).
  explicit AllToAllDispatcher(comm::ProcessGroup& ep, comm::ProcessGroup* statistics = nullptr)
      : ep_(ep), statistics_(statistics != nullptr ? *statistics : ep) {}
  int64_t ranks() const override { return ep_.size(); }
  int64_t rank() const override { return ep_.rank(); }
  std::vector<int64_t> exchange_counts(const std::vector<int64_t>& counts, int64_t local_experts) const override;
  Tensor dispatch(const Tensor& rows, const nn::DispatchPlan& plan) const override;
  Tensor combine(const Tensor& rows, const nn::DispatchPlan& plan) const override;
  void max_and_sum_over_ranks(std::vector<float>& most, std::vector<float>& total) const override;

 private:
  comm::ProcessGroup& ep_;
  comm::ProcessGroup& statistics_;
};

}  // namespace loom::parallel::ep
