#include "loom/nn/mlp.hpp"

#include "loom/kernels/gelu.hpp"
#include "loom/nn/saved_activation.hpp"

namespace loom::nn {

MLP::MLP(int64_t C, const LayerBuilder& layers) {
  fc_ = &register_module("fc", layers.column_parallel_linear(C, 4 * C));
  proj_ = &register_module("proj", layers.row_parallel_linear(4 * C, C));
}

Tensor MLP::forward_impl(const Tensor& x, Context& ctx) {
  Tensor h = fc_->forward(x, ctx);  // (B, T, 4C) pre-activation, saved by this module
  Tensor a;                         // (B, T, 4C) GELU output, saved by proj
  if (saved_in_bf16(ctx)) {
    // h kept as bf16 in the same pass, and the output written as the bf16 values proj's GEMM
    // reads and keeps (a proj layer takes a bf16 input as its own rounded copy).
    Tensor kept = Tensor::empty(h.shape(), DType::BF16);
    a = Tensor::empty(h.shape(), DType::BF16);
    kernels::gelu_forward(a.bf16(), kept.bf16(), h.f32(), h.numel());
    ctx.save(this, {kept});
  } else {
    a = Tensor::empty(h.shape());
    kernels::gelu_forward(a.f32(), h.f32(), h.numel());
    ctx.save(this, {h});
  }
  return proj_->forward(a, ctx);
}

Tensor MLP::backward_impl(const Tensor& dy, Context& ctx) {
  Tensor da = proj_->backward(dy, ctx);  // (B, T, 4C)
  const Tensor& h = ctx.saved(this, 0);  // GELU's derivative in fp32 from h (fp32 or bf16)
  if (h.dtype() == DType::BF16)
    kernels::gelu_backward(da.f32(), h.bf16(), da.f32(), h.numel());  // in place: da becomes dh
  else
    kernels::gelu_backward(da.f32(), h.f32(), da.f32(), h.numel());
  ctx.release(this);
  return fc_->backward(da, ctx);
}

}  // namespace loom::nn
