#include "loom/nn/layer_norm.hpp"

#include "loom/error.hpp"
#include "loom/kernels/layernorm.hpp"

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
  kernels::layernorm_forward(y.f32(), mean.f32(), rstd.f32(), x.f32(), weight_->value().f32(),
                             bias_->value().f32(), N, C_);
  ctx.save(this, {x, mean, rstd});
  return y;
}

Tensor LayerNorm::backward_impl(const Tensor& dy, Context& ctx) {
  const Tensor& x = ctx.saved(this, 0);
  const int64_t N = x.numel() / C_;
  Tensor dx = Tensor::empty(x.shape());  // (N, C)
  kernels::layernorm_backward(dx.f32(), weight_->grad().f32(), bias_->grad().f32(), dy.f32(), x.f32(),
                              weight_->value().f32(), ctx.saved(this, 1).f32(), ctx.saved(this, 2).f32(), N,
                              C_);
  weight_->grad_contributed();
  bias_->grad_contributed();
  ctx.release(this);
  return dx;
}

}  // namespace loom::nn
