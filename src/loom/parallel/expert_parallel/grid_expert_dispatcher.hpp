// Expert parallelism on a 3D grid (4D hybrid + MoE): the experts are shared out over the
// grid's plane (row x col, tp3d::PlaneExperts) and, within each plane rank's block, over the
// `ep` ranks (a split of dp, AllToAllDispatcher), so a rank holds E / (plane x ep) of them.
// Plane rank q with ep rank r holds block q ep + r: the experts of plane block q, split over
// ep. Dispatch is the plane's slice (no communication: every plane rank routed the same
// tokens), then the all-to-all over the ep ranks at the same grid position; combine runs the
// all-to-all back and then the plane's all-gather, so every plane rank again holds every
// row's output. Backward swaps the directions as for either alone (nn::MoE).
#pragma once

#include "loom/parallel/expert_parallel/all_to_all_dispatcher.hpp"
#include "loom/parallel/tensor_parallel_3d/plane_experts.hpp"

namespace loom::parallel::ep {

class GridExpertDispatcher : public nn::ExpertDispatcher {
 public:
  // *_statistics: groups over the same ranks as plane and ep, for the routing statistics'
  // reductions (null: the groups themselves).
  GridExpertDispatcher(comm::ProcessGroup& plane, comm::ProcessGroup& ep, comm::ProcessGroup* plane_statistics = nullptr,
                       comm::ProcessGroup* ep_statistics = nullptr)
      : plane_(plane, plane_statistics), ep_(ep, ep_statistics) {}
  int64_t ranks() const override { return plane_.ranks() * ep_.ranks(); }
  int64_t rank() const override { return plane_.rank() * ep_.ranks() + ep_.rank(); }
  // Collective over ep: the counts of plane block q's experts exchanged with the ep ranks.
  std::vector<int64_t> exchange_counts(const std::vector<int64_t>& counts, int64_t local_experts) const override;
  Tensor dispatch(const Tensor& rows, const nn::DispatchPlan& plan) const override;
  Tensor combine(const Tensor& rows, const nn::DispatchPlan& plan) const override;
  // Over the plane, then over ep: the maximum and the sum over all plane x ep ranks.
  void max_and_sum_over_ranks(std::vector<float>& most, std::vector<float>& total) const override;

 private:
  tp3d::PlaneExperts plane_;
  AllToAllDispatcher ep_;
  // A forward's plan seen by each stage: the plane's over E experts in blocks of E / plane,
  // and the ep ranks' over plane block q's experts.
  nn::DispatchPlan plane_plan(const nn::DispatchPlan& plan) const;
  nn::DispatchPlan ep_plan(const nn::DispatchPlan& plan) const;
};

}  // namespace loom::parallel::ep
