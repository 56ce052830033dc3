#include "loom/parallel/tensor_parallel_3d/depth_gradient_mean.hpp"

#include <chrono>

namespace loom::parallel::tp3d {

DepthGradientMean::DepthGradientMean(nn::Module& model, std::unique_ptr<GradientSync> inner, const Grid3D& grid,
                                     const ParameterFilter& averaged)
    : inner_(std::move(inner)), grid_(grid) {
  for (nn::Parameter* p : model.parameters())
    if (averaged(*p))
      p->add_grad_ready_hook([this](nn::Parameter& q) {
        if (sync_)
          in_flight_.push_back(grid_.group(Axis::Depth).all_reduce_async(q.grad().f32(), q.grad().numel(), comm::ReduceOp::Avg));
      });
}

void DepthGradientMean::set_sync(bool on) {
  sync_ = on;
  inner_->set_sync(on);
}

void DepthGradientMean::finish_gradient_sync() {
  const auto t0 = std::chrono::steady_clock::now();
  for (comm::Work& w : in_flight_) w.wait();
  in_flight_.clear();
  grid_.add_waited_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  inner_->finish_gradient_sync();
}

}  // namespace loom::parallel::tp3d
