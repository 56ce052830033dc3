// The transformer's feed-forward block: Linear(C, 4C), GELU, Linear(4C, C).
#pragma once

#include "loom/nn/layer_builder.hpp"
#include "loom/nn/linear.hpp"

namespace loom::nn {

class MLP : public Module {
 public:
  // Tensor parallel: fc column-parallel, proj row-parallel (4C/t hidden units per rank).
  explicit MLP(int64_t C, const LayerBuilder& layers = serial_layers());
  Linear& fc() { return *fc_; }
  Linear& proj() { return *proj_; }

 protected:
  Tensor forward_impl(const Tensor& x, Context& ctx) override;
  Tensor backward_impl(const Tensor& dy, Context& ctx) override;

 private:
  Linear* fc_;    // C -> 4C
  Linear* proj_;  // 4C -> C
};

}  // namespace loom::nn
