// Data parallelism of a model whose experts are split over the `ep` ranks: the dense
// parameters (attention, router, embeddings, LayerNorms) are replicas on every data-parallel
// rank and averaged over all of dp, by DDP or by ZeRO (which then shards them over dp as
// usual); an expert's weights are replicas only on the dp / ep ranks holding that expert
// (the `expert_dp` group), and reduced over those alone, whole (ep already splits them; ZeRO
// leaves them out, as DeepSpeed's and Megatron's expert-data-parallel groups keep experts
// apart from the dense state). An expert's rows come from all ep ranks of its group, each
// rank's loss a mean over its own tokens, so its local gradient already sums ep ranks'
// shares: the data-parallel mean is the sum over expert_dp divided by all of dp (dp / ep
// replicas x ep), not by expert_dp alone, which would leave it ep times too large (the bug
// other systems shipped).
#pragma once

#include <memory>

#include "loom/parallel/ddp.hpp"

namespace loom::parallel {
class ShardedDataParallel;
}

namespace loom::parallel::ep {

// Whether p is one rank's block of a mixture of experts' stacked expert weights.
bool is_expert_parameter(const nn::Parameter& p);

class ExpertDataParallel : public GradientSync {
 public:
  // dense: the sync of every non-expert parameter over dp (DDP, or ZeRO built with
  // `only = !is_expert_parameter`). Collective over expert_dp: its DDP broadcasts the experts
  // from its rank 0. ep: the expert-parallel group (dp = ep x expert_dp).
  // experts_after_backward: the experts' DDP reduces after the last backward, in
  // finish_gradient_sync(), even where the dense part reduces during backward (a pipeline's
  // interleaved chunks under ZeRO-2/3: a bucket spans chunks whose last backwards lie apart).
  ExpertDataParallel(nn::Module& model, std::unique_ptr<GradientSync> dense, comm::ProcessGroup& expert_dp,
                     const comm::ProcessGroup& ep, DdpOptions options, bool experts_after_backward = false);
  std::vector<nn::Parameter*> optimizer_parameters() const override;
  void zero_grad() override { dense_->zero_grad(); }
  void set_sync(bool on) override;
  void sync_now() override;
  void finish_gradient_sync() override;
  void after_optimizer_step() override { dense_->after_optimizer_step(); }
  void after_evaluation() override { dense_->after_evaluation(); }
  bool shards_gradients() const override { return dense_->shards_gradients(); }
  bool reduces_every_backward() const override { return dense_->reduces_every_backward(); }
  Tensor gradient_held(nn::Parameter& p) override { return dense_->gradient_held(p); }
  // Collective over dp when the dense part is sharded: the dense parameters' part counted on
  // ep rank 0 only (the finalizer sums over ep, where they are replicas), the experts' on
  // every rank (each holds different ones).
  double grad_sum_squares(const ParameterFilter& counted) override;
  double comm_seconds() const override;
  double exposed_comm_seconds() const override;
  // The dense part's ZeRO, for checkpoints and the memory report; null under DDP.
  ShardedDataParallel* sharded() const;

 private:
  std::vector<nn::Parameter*> expert_params_;
  float expert_scale_;  // 1 / ep: the expert DDP divides by expert_dp only
  bool dense_counted_;  // ep rank 0
  bool experts_after_backward_;
  std::unique_ptr<GradientSync> dense_;
  std::unique_ptr<DistributedDataParallel> experts_;  // null when expert_dp has one rank
};

}  // namespace loom::parallel::ep
