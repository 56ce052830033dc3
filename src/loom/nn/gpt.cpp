#include "loom/nn/gpt.hpp"

#include <cmath>

#include "loom/error.hpp"
#include "loom/nn/saved_activation.hpp"

namespace loom::nn {

GPT::GPT(const GPTConfig& config, uint64_t seed, const LayerBuilder& layers, GPTStage stage)
    : config_(config), layers_(layers), stage_(stage) {
  config_.validate();
  if (stage_.end_block < 0) stage_.end_block = config_.n_layer;
  check(0 <= stage_.first_block && stage_.first_block <= stage_.end_block && stage_.end_block <= config_.n_layer,
        "pipeline stage blocks [", stage_.first_block, ", ", stage_.end_block, ") are not within the model's ",
        config_.n_layer, " blocks");
  const int64_t C = config_.n_embd, t = layers_.vocabulary_parts(), Vp = config_.resolved_padded_vocab();
  check(Vp % t == 0, "padded vocabulary (", Vp, ") must be divisible by the tensor-parallel degree tp (", t,
        "): pad it to a multiple of 64 x tp");
  if (stage_.embedding) {
    embedding_ = &register_module("embedding", layers_.embedding(config_.vocab_size, Vp, config_.block_size, C));
    // Tied: the LM head reads the same table, so two gradient contributions per backward.
    if (stage_.head) embedding_->wte().set_contributions_per_backward(2);
    embedding_dropout_ =
        HiddenDropout(config_.hidden_dropout, /*site=*/0, config_.block_size, layers_.sequence_parts());
  }
  for (int64_t l = stage_.first_block; l < stage_.end_block; ++l) {
    Block& b = register_module("blocks." + std::to_string(l), std::make_unique<Block>(C, config_.n_head, layers_, config_.moe.is_moe_block(l) ? &config_.moe : nullptr));
    b.set_recompute(config_.recompute);
    b.set_selective_recompute(config_.selective_recompute);
    b.set_hidden_dropout(config_.hidden_dropout, l, config_.block_size, layers_.sequence_parts());
    b.set_attention_dropout(config_.attention_dropout, l, config_.block_size);
    blocks_.push_back(&b);
  }
  if (stage_.head) {
    ln_f_ = &register_module("ln_f", std::make_unique<LayerNorm>(C));
    if (!stage_.embedding) {
      head_copy_ = &register_parameter("embedding.wte", {Vp / t, C}, /*weight_decay=*/true);
      head_copy_->set_shard_spec(layers_.vocabulary_shard());
      head_copy_->set_padded_past_row(config_.vocab_size);
    }
    head_weight().set_read_by_gemms(true);  // the LM head's GEMMs; a stage without it only looks rows up
  }
  init_weights(seed);
}

Embedding& GPT::embedding() {
  check(embedding_ != nullptr, "this pipeline stage has no embedding");
  return *embedding_;
}

Parameter& GPT::head_weight() {
  check(has_head(), "this pipeline stage has no LM head");
  return embedding_ != nullptr ? embedding_->wte() : *head_copy_;
}

void GPT::init_weights(uint64_t seed) {
  // GPT-2: normal(0, 0.02) everywhere, residual projections scaled by 1/sqrt(2L);
  // biases zero and LayerNorm gains one (set by their constructors). The draws follow the
  // whole model's order on every stage (a part another stage holds is drawn and dropped),
  // so every layout starts from the serial weights.
  Rng rng(seed);
  const float stddev = 0.02f;
  const float residual_stddev = stddev / std::sqrt(2.0f * static_cast<float>(config_.n_layer));
  auto draw = [&](Parameter* p, const Shape& full, float sd) {
    if (p != nullptr) return init_normal(*p, sd, rng);
    Tensor scratch = Tensor::empty(full, DType::F32, MemoryCategory::Other);
    init_normal(scratch, sd, rng);
  };
  const int64_t C = config_.n_embd;
  draw(embedding_ ? &embedding_->wte() : head_copy_, {config_.resolved_padded_vocab(), C}, stddev);
  draw(embedding_ ? &embedding_->wpe() : nullptr, {config_.block_size, C}, stddev);
  for (int64_t l = 0; l < config_.n_layer; ++l) {
    Block* b = l >= stage_.first_block && l < stage_.end_block ? blocks_[l - stage_.first_block] : nullptr;
    draw(b ? &b->attn().qkv().weight() : nullptr, {3 * C, C}, stddev);
    draw(b ? &b->attn().proj().weight() : nullptr, {C, C}, residual_stddev);
    if (config_.moe.is_moe_block(l)) {  // router, then every expert's fc and proj (stacked)
      const int64_t E = config_.moe.experts;
      MoE* moe = b ? b->moe() : nullptr;
      draw(moe ? &moe->router().weight() : nullptr, {E, C}, stddev);
      draw(moe ? &moe->experts().fc_weight() : nullptr, {E, 4 * C, C}, stddev);
      draw(moe ? &moe->experts().proj_weight() : nullptr, {E, C, 4 * C}, residual_stddev);
      continue;
    }
    draw(b ? &b->mlp().fc().weight() : nullptr, {4 * C, C}, stddev);
    draw(b ? &b->mlp().proj().weight() : nullptr, {C, 4 * C}, residual_stddev);
  }
}

Tensor GPT::forward_impl(const Tensor& input, Context& ctx) {
  Tensor x = input;  // (B, T, C) from the stage before, or token ids (B, T)
  if (embedding_) {
    x = embedding_->forward(input, ctx);
    embedding_dropout_.apply(x, ctx);
  }
  for (Block* b : blocks_) x = b->forward(x, ctx);
  if (!has_head()) return x;
  x = ln_f_->forward(x, ctx);
  Tensor logits = layers_.head_logits(x, head_weight());  // (B, T, Vp): the whole sequence
  ctx.save(this, {saved_activation(x, ctx)});
  return logits;
}

Tensor GPT::backward_impl(const Tensor& dout, Context& ctx) {
  Tensor dx = dout;  // (B, T, C), or dlogits on the head's stage
  if (has_head()) {
    Parameter& wte = head_weight();
    dx = layers_.head_backward(dout, ctx.saved(this, 0), wte);  // kept: the final LayerNorm's output
    wte.grad_contributed();
    ctx.release(this);
    dx = ln_f_->backward(dx, ctx);
  }
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) dx = (*it)->backward(dx, ctx);
  if (!embedding_) return dx;
  embedding_dropout_.apply(dx, ctx);
  embedding_->backward(dx, ctx);
  return Tensor();
}

}  // namespace loom::nn
