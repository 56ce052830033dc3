// Pre-LayerNorm transformer block: x + attn(ln1(x)), then + mlp(ln2(.)); in a mixture-of-
// experts block the MLP is a MoE layer (moe.hpp). With hidden dropout, each branch's output is
// dropped out before it joins the residual stream (hidden_dropout.hpp).
// With recompute on, forward keeps only the block's input and backward re-runs the
// forward into a scratch context first (activation checkpointing, Chen et al. 2016).
#pragma once

#include "loom/nn/causal_self_attention.hpp"
#include "loom/nn/hidden_dropout.hpp"
#include "loom/nn/layer_norm.hpp"
#include "loom/nn/mlp.hpp"

namespace loom::nn {

class Block : public Module {
 public:
  // moe: a mixture of experts instead of the dense MLP (null: dense).
  Block(int64_t C, int64_t NH, const LayerBuilder& layers = serial_layers(), const MoeConfig* moe = nullptr);
  void set_recompute(bool on) { recompute_ = on; }
  // Only attention's probabilities recomputed (Megatron-LM's selective granularity).
  void set_selective_recompute(bool on) { attn_->set_selective_recompute(on); }
  bool recompute() const { return recompute_; }
  // Dropout with probability p on the attention and MLP outputs of block `layer` (its sites
  // 1 + 2 layer and 2 + 2 layer; the embedding's is 0), sequences of block_size split as `parts` say.
  void set_hidden_dropout(double p, int64_t layer, int64_t block_size, const SequenceParts& parts);
  // Dropout with probability p on block `layer`'s attention probabilities (its site
  // kAttentionDropoutSites + layer), sequences of block_size.
  void set_attention_dropout(double p, int64_t layer, int64_t block_size);
  static constexpr uint64_t kAttentionDropoutSites = uint64_t{1} << 32;
  CausalSelfAttention& attn() { return *attn_; }
  MLP& mlp();
  MoE* moe() { return moe_; }  // null in a dense block
  LayerNorm& ln1() { return *ln1_; }
  LayerNorm& ln2() { return *ln2_; }

 protected:
  Tensor forward_impl(const Tensor& x, Context& ctx) override;  // x (B, T, C)
  Tensor backward_impl(const Tensor& dy, Context& ctx) override;

 private:
  Tensor forward_body(const Tensor& x, Context& ctx);
  Tensor backward_body(const Tensor& dy, Context& ctx);

  bool recompute_ = false;
  HiddenDropout attn_dropout_, ffn_dropout_;
  LayerNorm* ln1_;
  CausalSelfAttention* attn_;
  LayerNorm* ln2_;
  MLP* mlp_ = nullptr;
  MoE* moe_ = nullptr;
  Module* ffn_;  // mlp_ or moe_
};

}  // namespace loom::nn
