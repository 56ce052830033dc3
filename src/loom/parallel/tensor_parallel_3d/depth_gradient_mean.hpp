// The mean over depth of the gradients a 3D grid keeps whole on every depth rank (biases,
// LayerNorms, embeddings, layers kept serial; each depth rank's is the mean over its own
// batch rows), overlapped with backward: each all-reduce starts when its gradient is ready in
// the step's last backward and runs under the rest of backward; finish_gradient_sync waits
// for them all (timed as the grid's exposed communication) before the data-parallel sync it
// wraps finishes. Only without data parallelism: DDP and ZeRO read each gradient when it is
// ready, so under --dp the mean stays blocking at that point (train/parallelize.cpp). The
// same all-reduces as the blocking mean, on the same buffers: the same bits.
#pragma once

#include <memory>
#include <vector>

#include "loom/comm/work.hpp"
#include "loom/parallel/gradient_sync.hpp"
#include "loom/parallel/tensor_parallel_3d/grid.hpp"

namespace loom::parallel::tp3d {

class DepthGradientMean : public GradientSync {
 public:
  // averaged: which parameters' gradients are reduced (those not split over depth).
  DepthGradientMean(nn::Module& model, std::unique_ptr<GradientSync> inner, const Grid3D& grid,
                    const ParameterFilter& averaged);

  std::vector<nn::Parameter*> optimizer_parameters() const override { return inner_->optimizer_parameters(); }
  void zero_grad() override { inner_->zero_grad(); }
  void set_sync(bool on) override;
  void sync_now() override { inner_->sync_now(); }
  void finish_gradient_sync() override;
  void after_optimizer_step() override { inner_->after_optimizer_step(); }
  bool shards_gradients() const override { return inner_->shards_gradients(); }
  double grad_sum_squares(const ParameterFilter& counted) override { return inner_->grad_sum_squares(counted); }
  double comm_seconds() const override { return inner_->comm_seconds(); }
  double exposed_comm_seconds() const override { return inner_->exposed_comm_seconds(); }

 private:
  std::unique_ptr<GradientSync> inner_;
  const Grid3D& grid_;
  bool sync_ = true;
  std::vector<comm::Work> in_flight_;
};

}  // namespace loom::parallel::tp3d
