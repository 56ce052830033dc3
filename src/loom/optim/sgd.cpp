#include "loom/optim/sgd.hpp"

namespace loom::optim {

SGD::SGD(std::vector<nn::Parameter*> params, const SGDConfig& config)
    : Optimizer(std::move(params)), config_(config) {
  for (nn::Parameter* p : params_)
    momentum_.push_back(Tensor::zeros(p->shape(), DType::F32, MemoryCategory::OptimizerState));
}

void SGD::step(float lr) {
  ++steps_;
  for (size_t i = 0; i < params_.size(); ++i) {
    nn::Parameter& p = *params_[i];
    float* w = p.value().f32();
    const float* g = p.grad().f32();
    float* buf = momentum_[i].f32();
    const float wd = p.weight_decay() ? config_.weight_decay : 0.0f;
    const float mu = config_.momentum;
    // PyTorch initialises the buffer to the first gradient, which is mu * 0 + g here.
#pragma omp parallel for simd schedule(static)
    for (int64_t j = 0; j < p.numel(); ++j) {
      const float d = g[j] + wd * w[j];
      buf[j] = mu * buf[j] + d;
      w[j] -= lr * buf[j];
    }
  }
}

std::map<std::string, Tensor> SGD::state() {
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < params_.size(); ++i) out["momentum." + params_[i]->name()] = momentum_[i];
  return out;
}

}  // namespace loom::optim
