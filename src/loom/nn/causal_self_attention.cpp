#include "loom/nn/causal_self_attention.hpp"

#include "loom/error.hpp"
#include "loom/kernels/attention.hpp"

namespace loom::nn {

CausalSelfAttention::CausalSelfAttention(int64_t C, int64_t NH, const LayerBuilder& layers) {
  check(NH > 0 && C % NH == 0, "n_embd (", C, ") must be divisible by n_head (", NH, ")");
  const int64_t t = layers.tensor_parallel_size();
  check(NH % t == 0, "n_head (", NH, ") must be divisible by the tensor-parallel degree tp (", t, ")");
  C_ = C / t;
  NH_ = NH / t;
  qkv_ = &register_module("qkv", layers.column_parallel_linear(C, 3 * C, /*blocks=*/3));
  proj_ = &register_module("proj", layers.row_parallel_linear(C, C));
}

Tensor CausalSelfAttention::forward_impl(const Tensor& x, Context& ctx) {
  Tensor qkv = qkv_->forward(x, ctx);           // (B, T, 3C): the whole sequence, also under sequence parallelism
  const int64_t B = qkv.size(0), T = qkv.size(1);
  Tensor att = Tensor::empty({B, NH_, T, T});   // (B, NH, T, T) softmax probabilities
  Tensor heads = Tensor::empty({B, T, C_});     // (B, T, NH, HS)
  kernels::attention_forward(heads.f32(), att.f32(), qkv.f32(), B, T, C_, NH_);
  ctx.save(this, {qkv, att});
  return proj_->forward(heads, ctx);
}

Tensor CausalSelfAttention::backward_impl(const Tensor& dy, Context& ctx) {
  Tensor dheads = proj_->backward(dy, ctx);  // (B, T, C)
  const Tensor& qkv = ctx.saved(this, 0);
  const Tensor& att = ctx.saved(this, 1);
  const int64_t B = qkv.size(0), T = qkv.size(1);
  Tensor dqkv = Tensor::empty(qkv.shape());  // (B, T, 3C)
  {
    Tensor datt = Tensor::empty(att.shape());  // (B, NH, T, T) scratch
    kernels::attention_backward(dqkv.f32(), datt.f32(), dheads.f32(), qkv.f32(), att.f32(), B, T, C_, NH_);
  }
  ctx.release(this);
  return qkv_->backward(dqkv, ctx);
}

}  // namespace loom::nn
