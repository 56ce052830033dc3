// Causal multi-head self-attention: one QKV projection, the attention core the layer
// builder gives (the fused kernel over all heads, or a ring under context parallelism), and
// an output projection.
#pragma once

#include "loom/nn/layer_builder.hpp"
#include "loom/nn/linear.hpp"

namespace loom::nn {

class CausalSelfAttention : public Module {
 public:
  // Under tensor parallelism (layers.tensor_parallel_size() = t) this rank computes NH/t
  // heads: QKV column-parallel, the output projection row-parallel.
  CausalSelfAttention(int64_t C, int64_t NH, const LayerBuilder& layers = serial_layers());
  // Dropout with probability p on the attention probabilities while training, drawn at `site`
  // from sequences of block_size positions (attention_core.hpp).
  void set_attention_dropout(double p, uint64_t site, int64_t block_size);
  // Selective recompute: the core's probabilities recomputed in backward (attention_core.hpp).
  void set_selective_recompute(bool on) { core_->set_recompute_probabilities(on); }
  Linear& qkv() { return *qkv_; }
  Linear& proj() { return *proj_; }

 protected:
  Tensor forward_impl(const Tensor& x, Context& ctx) override;   // x (B, T, C)
  Tensor backward_impl(const Tensor& dy, Context& ctx) override;

 private:
  int64_t C_, NH_;  // this rank's width and heads (C/t, NH/t)
  int64_t heads_, first_head_;  // the model's heads; the model-wide index of this rank's first
  Linear* qkv_;   // C -> 3C
  Linear* proj_;  // C -> C
  AttentionCore* core_;  // (B, T, 3C) -> (B, T, C): the attention itself, serial or a ring (context parallel)
};

}  // namespace loom::nn
