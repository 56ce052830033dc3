// Optimizer interface: steps a list of parameters with a given learning rate. Its state is
// a list of named tensors so a checkpoint can save and restore it exactly.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "loom/nn/parameter.hpp"

namespace loom::optim {

class Optimizer {
 public:
  explicit Optimizer(std::vector<nn::Parameter*> params) : params_(std::move(params)) {}
  virtual ~Optimizer() = default;

  virtual void step(float lr) = 0;
  void zero_grad();
  // Every state tensor by a stable name ("exp_avg.blocks.0.mlp.fc.weight"); views of the
  // optimizer's own storage, so loading into them restores the state.
  virtual std::map<std::string, Tensor> state() = 0;
  // The prefixes of those names, one per tensor kept per parameter ("exp_avg", "exp_avg_sq").
  virtual std::vector<std::string> state_kinds() const = 0;
  int64_t steps_taken() const { return steps_; }
  void set_steps_taken(int64_t steps) { steps_ = steps; }
  const std::vector<nn::Parameter*>& params() const { return params_; }

 protected:
  std::vector<nn::Parameter*> params_;
  int64_t steps_ = 0;
};

}  // namespace loom::optim
