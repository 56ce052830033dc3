// LayerNorm over the last dimension with a learned gain and bias (neither decayed).
#pragma once

#include "loom/nn/module.hpp"

namespace loom::nn {

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t C);
  Parameter& weight() { return *weight_; }
  Parameter& bias() { return *bias_; }

 protected:
  Tensor forward_impl(const Tensor& x, Context& ctx) override;
  Tensor backward_impl(const Tensor& dy, Context& ctx) override;

 private:
  int64_t C_;
  Parameter* weight_;  // (C)
  Parameter* bias_;    // (C)
};

}  // namespace loom::nn
