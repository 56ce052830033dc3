#include "loom/optim/adamw.hpp"

namespace loom::optim {

AdamW::AdamW(std::vector<nn::Parameter*> params, const AdamWConfig& config)
    : Optimizer(std::move(params)), config_(config) {
  for (nn::Parameter* p : params_) {
    exp_avg_.push_back(Tensor::zeros(p->shape(), DType::F32, MemoryCategory::OptimizerState));
    exp_avg_sq_.push_back(Tensor::zeros(p->shape(), DType::F32, MemoryCategory::OptimizerState));
  }
}

void AdamW::step(float lr) {
  ++steps_;
  for (size_t i = 0; i < params_.size(); ++i) {
    nn::Parameter& p = *params_[i];
    kernels::AdamWParams hp{lr, config_.beta1, config_.beta2, config_.eps,
                            p.weight_decay() ? config_.weight_decay : 0.0f, steps_};
    // Mixed precision: the GEMMs' bf16 copy is rewritten in this pass (not converted again at
    // the next step's first GEMM).
    bfloat16* copy = p.bf16_copy_to_refresh();
    kernels::adamw_update(p.value().f32(), p.grad().f32(), exp_avg_[i].f32(), exp_avg_sq_[i].f32(), p.numel(), hp,
                          copy);
    if (copy != nullptr) p.bf16_copy_refreshed();
  }
}

std::map<std::string, Tensor> AdamW::state() {
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out["exp_avg." + params_[i]->name()] = exp_avg_[i];
    out["exp_avg_sq." + params_[i]->name()] = exp_avg_sq_[i];
  }
  return out;
}

}  // namespace loom::optim
