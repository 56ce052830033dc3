// SGD with momentum (PyTorch semantics: buf = momentum * buf + grad; p -= lr * buf) and
// optional coupled weight decay on the parameters flagged for it.
#pragma once

#include "loom/optim/optimizer.hpp"

namespace loom::optim {

struct SGDConfig {
  float momentum = 0.9f;
  float weight_decay = 0.0f;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<nn::Parameter*> params, const SGDConfig& config);
  void step(float lr) override;
  std::map<std::string, Tensor> state() override;
  std::vector<std::string> state_kinds() const override { return {"momentum"}; }

 private:
  SGDConfig config_;
  std::vector<Tensor> momentum_;  // one per parameter, category OptimizerState
};

}  // namespace loom::optim
