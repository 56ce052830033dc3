#include "loom/nn/causal_attention.hpp"

#include "loom/kernels/attention.hpp"

namespace loom::nn {

Tensor CausalAttention::forward_impl(const Tensor& qkv, Context& ctx) {
  const int64_t B = qkv.size(0), T = qkv.size(1);
  Tensor att = Tensor::empty({B, NH_, T, T});  // (B, NH, T, T) softmax probabilities
  Tensor heads = Tensor::empty({B, T, C_});    // (B, T, NH, HS)
  kernels::attention_forward(heads.f32(), att.f32(), qkv.f32(), B, T, C_, NH_);
  ctx.save(this, {qkv, att});
  return heads;
}

Tensor CausalAttention::backward_impl(const Tensor& dheads, Context& ctx) {
  const Tensor& qkv = ctx.saved(this, 0);
  const Tensor& att = ctx.saved(this, 1);
  const int64_t B = qkv.size(0), T = qkv.size(1);
  Tensor dqkv = Tensor::empty(qkv.shape());  // (B, T, 3C)
  {
    Tensor datt = Tensor::empty(att.shape());  // (B, NH, T, T) scratch
    kernels::attention_backward(dqkv.f32(), datt.f32(), dheads.f32(), qkv.f32(), att.f32(), B, T, C_, NH_);
  }
  ctx.release(this);
  return dqkv;
}

}  // namespace loom::nn
