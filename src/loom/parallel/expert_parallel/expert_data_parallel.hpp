// Data parallelism of a model whose experts are split over the `ep` ranks: the dense
// parameters (attention, router, embeddings, LayerNorms) are replicas on every data-parallel
// rank and averaged over all of dp; an expert's weights are replicas only on the dp / ep
// ranks holding that expert (the `expert_dp` group), and reduced over those alone. An
// expert's rows come from all ep ranks of its group, each rank's loss a mean over its own
// tokens, so its local gradient already sums ep ranks' shares: the data-parallel mean is the
// sum over expert_dp divided by all of dp (dp / ep replicas x ep), not by expert_dp alone,
// which would leave it ep times too large (the bug other systems shipped).
#pragma once

#include <memory>

#include "loom/parallel/ddp.hpp"

namespace loom::parallel::ep {

// Whether p is one rank's block of a mixture of experts' stacked expert weights.
bool is_expert_parameter(const nn::Parameter& p);

class ExpertDataParallel : public GradientSync {
 public:
  // Collective over dp and expert_dp: each DDP broadcasts its parameters from its rank 0.
  // ep: the expert-parallel degree (dp = ep x expert_dp).
  ExpertDataParallel(nn::Module& model, comm::ProcessGroup& dp, comm::ProcessGroup& expert_dp, int64_t ep,
                     DdpOptions options);
  std::vector<nn::Parameter*> optimizer_parameters() const override { return params_; }
  void set_sync(bool on) override;
  void sync_now() override;
  void finish_gradient_sync() override;
  // Local: every replica holds its averaged gradients (the finalizer sums over ep, counting
  // dense parameters on ep rank 0 only).
  double grad_sum_squares(const ParameterFilter& counted) override { return sum_squares_of(params_, counted); }
  double comm_seconds() const override;
  double exposed_comm_seconds() const override;

 private:
  std::vector<nn::Parameter*> params_;
  std::vector<nn::Parameter*> expert_params_;
  float expert_scale_;  // 1 / ep: the expert DDP divides by expert_dp only
  std::unique_ptr<DistributedDataParallel> dense_, experts_;  // experts_: null when expert_dp has one rank
};

}  // namespace loom::parallel::ep
