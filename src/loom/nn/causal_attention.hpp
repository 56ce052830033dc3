// The attention core (attention_core.hpp) that attends over the rank's whole sequence, its
// heads in one fused kernel; context parallelism substitutes a ring over the sequence's ranks
// (LayerBuilder::attention).
#pragma once

#include "loom/nn/attention_core.hpp"

namespace loom::nn {

class CausalAttention : public AttentionCore {
 public:
  CausalAttention(int64_t C, int64_t NH) : C_(C), NH_(NH) {}

 protected:
  Tensor forward_impl(const Tensor& qkv, Context& ctx) override;  // (B, T, 3C) -> (B, T, C)
  Tensor backward_impl(const Tensor& dheads, Context& ctx) override;

 private:
  int64_t C_, NH_;
};

}  // namespace loom::nn
