#include "loom/nn/causal_self_attention.hpp"

#include "loom/error.hpp"

namespace loom::nn {

CausalSelfAttention::CausalSelfAttention(int64_t C, int64_t NH, const LayerBuilder& layers) {
  check(NH > 0 && C % NH == 0, "n_embd (", C, ") must be divisible by n_head (", NH, ")");
  const int64_t t = layers.tensor_parallel_size();
  check(NH % t == 0, "n_head (", NH, ") must be divisible by the tensor-parallel degree tp (", t, ")");
  C_ = C / t;
  NH_ = NH / t;
  heads_ = NH;
  first_head_ = layers.first_head(NH_);
  qkv_ = &register_module("qkv", layers.column_parallel_linear(C, 3 * C, /*blocks=*/3));
  proj_ = &register_module("proj", layers.row_parallel_linear(C, C));
  core_ = &register_module("core", layers.attention(C_, NH_));
}

void CausalSelfAttention::set_attention_dropout(double p, uint64_t site, int64_t block_size) {
  core_->set_dropout({.p = p, .site = site, .block_size = block_size, .heads = heads_, .first_head = first_head_});
}

Tensor CausalSelfAttention::forward_impl(const Tensor& x, Context& ctx) {
  // qkv (B, T, 3C): the whole sequence, also under sequence parallelism; this rank's tokens of
  // it under context parallelism, whose core attends over the other ranks' keys too.
  Tensor qkv = qkv_->forward(x, ctx);
  return proj_->forward(core_->forward(qkv, ctx), ctx);  // heads (B, T, NH, HS)
}

Tensor CausalSelfAttention::backward_impl(const Tensor& dy, Context& ctx) {
  Tensor dheads = proj_->backward(dy, ctx);  // (B, T, C)
  return qkv_->backward(core_->backward(dheads, ctx), ctx);
}

}  // namespace loom::nn
