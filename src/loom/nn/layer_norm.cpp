#include "loom/nn/layer_norm.hpp"

#include "loom/error.hpp"
#include "loom/kernels/layernorm.hpp"
#include "loom/nn/saved_activation.hpp"

namespace loom::nn {

LayerNorm::LayerNorm(int64_t C) : C_(C) {
  weight_ = &register_parameter("weight", {C}, /*weight_decay=*/false);
  bias_ = &register_parameter("bias", {C}, /*weight_decay=*/false);
  weight_->value().fill_(1.0f);
}

Tensor LayerNorm::forward_impl(const Tensor& x, Context& ctx) {
  check(x.ndim() >= 1 && x.size(-1) == C_, "LayerNorm '", name(), "' expects last dimension ", C_,
        ", got shape ", shape_str(x.shape()));
  const int64_t N = x.numel() / C_;
  Tensor y = Tensor::empty(x.shape());  // (N, C)
  Tensor mean = Tensor::empty({N});     // (N)
  Tensor rstd = Tensor::empty({N});     // (N)
  // Kept for backward: x, or under bf16 its bf16 copy written in the same pass; the
  // statistics stay fp32.
  const Tensor kept = saved_in_bf16(ctx) ? Tensor::empty(x.shape(), DType::BF16) : x;
  kernels::layernorm_forward(y.f32(), mean.f32(), rstd.f32(), x.f32(), weight_->value().f32(), bias_->value().f32(),
                             N, C_, kept.dtype() == DType::BF16 ? kept.bf16() : nullptr);
  ctx.save(this, {kept, mean, rstd});
  return y;
}

Tensor LayerNorm::backward_impl(const Tensor& dy, Context& ctx) {
  const Tensor& x = ctx.saved(this, 0);  // fp32, or bf16 read widened by the kernel
  const int64_t N = x.numel() / C_;
  Tensor dx = Tensor::empty(x.shape(), DType::F32);  // (N, C)
  const float *mean = ctx.saved(this, 1).f32(), *rstd = ctx.saved(this, 2).f32();
  if (x.dtype() == DType::BF16)
    kernels::layernorm_backward(dx.f32(), weight_->grad().f32(), bias_->grad().f32(), dy.f32(), x.bf16(),
                                weight_->value().f32(), mean, rstd, N, C_);
  else
    kernels::layernorm_backward(dx.f32(), weight_->grad().f32(), bias_->grad().f32(), dy.f32(), x.f32(),
                                weight_->value().f32(), mean, rstd, N, C_);
  weight_->grad_contributed();
  bias_->grad_contributed();
  ctx.release(this);
  return dx;
}

}  // namespace loom::nn
