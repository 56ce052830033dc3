#include "loom/nn/causal_attention.hpp"

#include "loom/kernels/attention.hpp"
#include "loom/nn/gemm_input.hpp"
#include "loom/nn/saved_activation.hpp"

namespace loom::nn {

Tensor CausalAttention::forward_impl(const Tensor& qkv, Context& ctx) {
  const int64_t B = qkv.size(0), T = qkv.size(1);
  // What backward reads: q, k, v, kept in bf16 under mixed precision, and the softmax
  // probabilities (B NH T^2 values, most of a layer's activations at T = 1024). Those are
  // kept only in fp32 training; under bf16 backward recomputes them from q and k and each
  // row's log-sum-exp, a causal block of a group of heads at a time, as Megatron-LM's
  // selective recomputation and FlashAttention do (Korthikanti et al. 2022: the 5as/h term).
  // Under selective recompute fp32 keeps nothing either: backward runs the forward's products
  // and softmax again on the same operands, a group of heads at a time, bit for bit.
  const bool keep_probabilities = !saved_in_bf16(ctx) && !ctx.inference() && !recompute_probabilities();
  Tensor att = keep_probabilities ? Tensor::empty({B, NH_, T, T}) : Tensor();  // (B, NH, T, T)
  // In their place bf16 keeps each row's log-sum-exp (4 bytes a row and head), from which
  // backward rebuilds a block's probabilities in one pass, as FlashAttention does.
  Tensor lse = saved_in_bf16(ctx) ? Tensor::empty({B, NH_, T}) : Tensor();  // (B, NH, T)
  Tensor heads = Tensor::empty({B, T, C_});                                   // (B, T, NH, HS)
  // The bf16 copy kept for backward is also what the products read (the same rounded values).
  const Tensor kept = saved_activation(qkv, ctx);
  kernels::attention_forward(heads.f32(), keep_probabilities ? att.f32() : nullptr, gemm_input(kept), B, T, C_, NH_,
                             lse.defined() ? lse.f32() : nullptr, dropout(ctx));
  ctx.save(this, {kept, att, lse});
  return heads;
}

Tensor CausalAttention::backward_impl(const Tensor& dheads, Context& ctx) {
  const Tensor& qkv = ctx.saved(this, 0);  // q, k, v as the forward's products read them (bf16 or fp32)
  const Tensor& att = ctx.saved(this, 1);
  const Tensor& lse = ctx.saved(this, 2);
  const int64_t B = qkv.size(0), T = qkv.size(1);
  Tensor dqkv = Tensor::empty(qkv.shape(), DType::F32);  // (B, T, 3C)
  const Tensor datt = att.defined() ? Tensor::empty(att.shape()) : Tensor();  // (B, NH, T, T) scratch
  // Under dropout the kernel overwrites att (released below) with the dropped probabilities.
  kernels::attention_backward(dqkv.f32(), att.defined() ? datt.f32() : nullptr, dheads.f32(), gemm_input(qkv),
                              att.defined() ? att.f32() : nullptr, B, T, C_, NH_, lse.defined() ? lse.f32() : nullptr,
                              dropout(ctx));
  ctx.release(this);
  return dqkv;
}

}  // namespace loom::nn
