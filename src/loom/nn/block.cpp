#include "loom/nn/block.hpp"

#include "loom/error.hpp"
#include "loom/kernels/residual.hpp"
#include "loom/nn/saved_activation.hpp"

namespace loom::nn {

Block::Block(int64_t C, int64_t NH, const LayerBuilder& layers, const MoeConfig* moe) {
  ln1_ = &register_module("ln1", std::make_unique<LayerNorm>(C));
  attn_ = &register_module("attn", std::make_unique<CausalSelfAttention>(C, NH, layers));
  ln2_ = &register_module("ln2", std::make_unique<LayerNorm>(C));
  if (moe != nullptr) ffn_ = moe_ = &register_module("moe", layers.mixture_of_experts(C, *moe));
  else ffn_ = mlp_ = &register_module("mlp", std::make_unique<MLP>(C, layers));
}

void Block::set_hidden_dropout(double p, int64_t layer, int64_t block_size, const SequenceParts& parts) {
  attn_dropout_ = HiddenDropout(p, static_cast<uint64_t>(1 + 2 * layer), block_size, parts);
  ffn_dropout_ = HiddenDropout(p, static_cast<uint64_t>(2 + 2 * layer), block_size, parts);
}

void Block::set_attention_dropout(double p, int64_t layer, int64_t block_size) {
  attn_->set_attention_dropout(p, kAttentionDropoutSites + static_cast<uint64_t>(layer), block_size);
}

MLP& Block::mlp() {
  check(mlp_ != nullptr, "block '", name(), "' has a mixture of experts, not a dense MLP");
  return *mlp_;
}

Tensor Block::forward_body(const Tensor& x, Context& ctx) {
  Tensor a = attn_->forward(ln1_->forward(x, ctx), ctx);  // (B, T, C)
  attn_dropout_.apply(a, ctx);
  kernels::residual_forward(a.f32(), a.f32(), x.f32(), a.numel());  // a = x + drop(attn(ln1(x)))
  Tensor m = ffn_->forward(ln2_->forward(a, ctx), ctx);    // (B, T, C)
  ffn_dropout_.apply(m, ctx);
  kernels::residual_forward(m.f32(), m.f32(), a.f32(), m.numel());
  return m;
}

namespace {

// The gradient a dropped-out branch's output receives: a masked copy (the residual path keeps
// the unmasked one), or dy itself without dropout.
Tensor through_dropout(const Tensor& dy, const HiddenDropout& dropout, const Context& ctx) {
  if (!dropout.active(ctx)) return dy;
  Tensor d = dy.clone();
  dropout.apply(d, ctx);
  return d;
}

}  // namespace

Tensor Block::backward_body(const Tensor& dy, Context& ctx) {
  // d(residual 2): dy flows to a directly and through mlp(ln2(a)).
  Tensor da = ln2_->backward(ffn_->backward(through_dropout(dy, ffn_dropout_, ctx), ctx), ctx);
  kernels::add_inplace(da.f32(), dy.f32(), da.numel());
  Tensor dx = ln1_->backward(attn_->backward(through_dropout(da, attn_dropout_, ctx), ctx), ctx);
  kernels::add_inplace(dx.f32(), da.f32(), dx.numel());
  return dx;
}

Tensor Block::forward_impl(const Tensor& x, Context& ctx) {
  if (!recompute_) return forward_body(x, ctx);
  Context scratch = ctx.replay();  // dropped on return: only x is kept
  Tensor y = forward_body(x, scratch);
  // Mixed precision keeps x as a bf16 copy (saved_activation.hpp), as Megatron-LM checkpoints
  // its bf16 hidden states: the replay then runs on x rounded to bf16, whose first consumer,
  // ln1, keeps that rounding for backward anyway.
  ctx.save(this, {saved_activation(x, ctx)});
  return y;
}

Tensor Block::backward_impl(const Tensor& dy, Context& ctx) {
  if (!recompute_) return backward_body(dy, ctx);
  Context replay = ctx.replay();  // the same dropout masks as the forward's
  forward_body(widened(ctx.saved(this, 0)), replay);
  ctx.release(this);
  return backward_body(dy, replay);
}

}  // namespace loom::nn
