#include "loom/nn/mlp.hpp"

#include "loom/kernels/gelu.hpp"

namespace loom::nn {

MLP::MLP(int64_t C, const LayerBuilder& layers) {
  fc_ = &register_module("fc", layers.column_parallel_linear(C, 4 * C));
  proj_ = &register_module("proj", layers.row_parallel_linear(4 * C, C));
}

Tensor MLP::forward_impl(const Tensor& x, Context& ctx) {
  Tensor h = fc_->forward(x, ctx);            // (B, T, 4C) pre-activation, saved by this module
  Tensor a = Tensor::empty(h.shape());        // (B, T, 4C) GELU output, saved by proj
  kernels::gelu_forward(a.f32(), h.f32(), h.numel());
  ctx.save(this, {h});
  return proj_->forward(a, ctx);
}

Tensor MLP::backward_impl(const Tensor& dy, Context& ctx) {
  Tensor da = proj_->backward(dy, ctx);  // (B, T, 4C)
  const Tensor& h = ctx.saved(this, 0);
  kernels::gelu_backward(da.f32(), h.f32(), da.f32(), h.numel());  // in place: da becomes dh
  ctx.release(this);
  return fc_->backward(da, ctx);
}

}  // namespace loom::nn
