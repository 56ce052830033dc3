// AdamW (decoupled weight decay), as torch.optim.AdamW; parameters flagged
// weight_decay() == false (biases, LayerNorm) are not decayed.
#pragma once

#include "loom/kernels/adamw.hpp"
#include "loom/optim/optimizer.hpp"

namespace loom::optim {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<nn::Parameter*> params, const AdamWConfig& config);
  void step(float lr) override;
  std::map<std::string, Tensor> state() override;
  std::vector<std::string> state_kinds() const override { return {"exp_avg", "exp_avg_sq"}; }

 private:
  AdamWConfig config_;
  std::vector<Tensor> exp_avg_;     // first moments, one per parameter, category OptimizerState
  std::vector<Tensor> exp_avg_sq_;  // second moments
};

}  // namespace loom::optim
