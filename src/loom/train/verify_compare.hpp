// `loom verify`'s comparison of the layout's tensors with the serial run's
// (apps/verify_command.cpp): each tensor's worst element, relative to the tensor's largest
// magnitude, and for parameters under AdamW a bound per element of what the gradient
// tolerance lets its update differ by (AdamWBound, optim/adamw_spread.hpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "loom/tensor/tensor.hpp"
#include "loom/train/config.hpp"

namespace loom::train {

struct Worst {
  std::string name = "-";  // the parameter's name, without the key's prefix
  double error = 0.0;
};

// Per parameter ("model.<name>"), per element: the difference from the serial run that
// gradients within the gradient tolerance can make, summed over the steps so far.
using Allowances = std::map<std::string, std::vector<float>>;

// Parameter elements past the parameter tolerance on their own but within it once their
// allowance is taken off: how many, and the largest such difference (relative, before the
// allowance), so that a user sees what the bound let through.
struct Excused {
  int64_t elements = 0;
  Worst worst;
};

struct ParameterComparison {
  Worst worst;  // what each element's allowance leaves of its difference, relative to the tensor's scale
  Excused excused;
};

// Gradients ("grad.<name>", gradient_dict()): the tensor whose element differs most.
Worst worst_gradient_difference(const std::map<std::string, Tensor>& got, const std::map<std::string, Tensor>& want);

// Parameters ("model.<name>", state_dict()). param_rtol: the tolerance an element past which
// counts as excused when its allowance brings it back within.
ParameterComparison compare_parameters(const std::map<std::string, Tensor>& got, const std::map<std::string, Tensor>& want,
                                       double param_rtol, const Allowances& allowances);

// The allowances under AdamW: each step, each element's update spread (adamw_update_spread) over
// gradients within grad_rtol of the gradient tensor's scale. Principled where a looser global
// tolerance is not: an element whose gradient is of ordinary size gets next to nothing (its
// update is lr * sign(g) whatever the rounding), one whose gradient is at the gradient
// tolerance's level of zero (a bias gradient summing to ~1e-8, of eps's order) gets up to the
// 2 lr that a gradient of either sign moves it by. Other optimizers get none.
class AdamWBound {
 public:
  // grads: the serial run's gradient_dict() of the step, before clipping; state: its
  // state_dict() before the update (the moments the update starts from); lr and grad_norm: the
  // step's; step: the update's 1-based count (AdamW's bias correction).
  void add_step(const TrainConfig& c, const std::map<std::string, Tensor>& grads, const std::map<std::string, Tensor>& state,
                float lr, double grad_norm, int64_t step, double grad_rtol);
  const Allowances& allowances() const { return allowances_; }

 private:
  Allowances allowances_;
};

}  // namespace loom::train
