// A mixture of experts on a 3D grid, its experts shared out over the grid's plane. Between
// blocks every rank of a plane (the row x col ranks of one depth slice) holds the same tokens
// with whole features, so rather than run every expert on every plane rank (R x C times the
// work), plane rank q holds experts [q E/P, (q + 1) E/P) of the P = R x C, runs only the rows
// routed to them, and the plane all-gathers the experts' outputs (uneven: each rank's rows),
// so every plane rank again holds every row's output, the same bits. No token moves before
// the experts (each rank already has them): dispatch is a slice of the rows. Backward runs
// the two with their directions swapped (nn::MoE): a rank takes its experts' slice of the
// output gradient, and the plane all-gathers their input gradients. This is Megatron-LM's
// all-gather token dispatcher with expert parallelism inside the tensor-parallel group. The
// depth ranks hold other batch rows and the same experts, whose gradients are averaged over
// depth as every parameter the grid does not split over it.
#pragma once

#include "loom/comm/process_group.hpp"
#include "loom/nn/expert_dispatch.hpp"

namespace loom::parallel::tp3d {

class PlaneExperts : public nn::ExpertDispatcher {
 public:
  // statistics: a group over the same ranks for the routing statistics' reductions, so they
  // count in no layout group's traffic (null: plane itself).
  explicit PlaneExperts(comm::ProcessGroup& plane, comm::ProcessGroup* statistics = nullptr)
      : plane_(plane), statistics_(statistics != nullptr ? *statistics : plane) {}
  int64_t ranks() const override { return plane_.size(); }
  int64_t rank() const override { return plane_.rank(); }
  // Every plane rank routed the same tokens: its own experts' rows come from itself alone.
  // No communication.
  std::vector<int64_t> exchange_counts(const std::vector<int64_t>& counts, int64_t local_experts) const override;
  // rows (R, C) grouped by expert -> the rows of this rank's experts, a copy of their block.
  Tensor dispatch(const Tensor& rows, const nn::DispatchPlan& plan) const override;
  // Each rank's experts' rows -> (R, C) every rank's, in expert order: an uneven all-gather
  // over the plane, in its activation dtype (bf16 in a bf16 run).
  Tensor combine(const Tensor& rows, const nn::DispatchPlan& plan) const override;
  void max_and_sum_over_ranks(std::vector<float>& most, std::vector<float>& total) const override;

 private:
  comm::ProcessGroup& plane_;
  comm::ProcessGroup& statistics_;
};

}  // namespace loom::parallel::tp3d
