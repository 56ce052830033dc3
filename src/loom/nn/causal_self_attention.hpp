// Causal multi-head self-attention: one QKV projection, the fused attention kernel over
// all heads, and an output projection.
#pragma once

#include "loom/nn/linear.hpp"

namespace loom::nn {

class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(int64_t C, int64_t NH);
  Linear& qkv() { return *qkv_; }
  Linear& proj() { return *proj_; }

 protected:
  Tensor forward_impl(const Tensor& x, Context& ctx) override;   // x (B, T, C)
  Tensor backward_impl(const Tensor& dy, Context& ctx) override;

 private:
  int64_t C_, NH_;
  Linear* qkv_;   // C -> 3C
  Linear* proj_;  // C -> C
};

}  // namespace loom::nn
