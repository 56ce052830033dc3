#include "loom/nn/linear.hpp"

#include <optional>

#include "loom/error.hpp"
#include "loom/kernels/matmul.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/nn/gemm_input.hpp"
#include "loom/nn/saved_activation.hpp"

namespace loom::nn {

using kernels::Trans;

Linear::Linear(int64_t in_features, int64_t out_features, bool bias) : in_(in_features), out_(out_features) {
  weight_ = &register_parameter("weight", {out_, in_}, /*weight_decay=*/true);
  weight_->set_read_by_gemms(true);
  weight_->set_read_only_by_gemms(true);  // (generation's fp32 decode reads value(), outside training)
  bias_ = bias ? &register_parameter("bias", {out_}, /*weight_decay=*/false) : nullptr;
}

Tensor Linear::forward_impl(const Tensor& x, Context& ctx) {
  // A weight kept in fp32 (Parameter::kept_in_fp32) makes the layer compute in fp32 under mixed
  // precision too: its input is neither rounded for the GEMM nor kept in bf16 for backward.
  std::optional<kernels::PrecisionScope> fp32;
  if (weight_->kept_in_fp32()) fp32.emplace(kernels::Precision::F32);
  // Mixed precision: x in bf16 once, read by this GEMM and kept for backward's weight gradient
  // (inference keeps nothing: the decode GEMV rounds its few rows itself).
  const Tensor input = saved_activation(x, ctx);
  Tensor y = project(input, /*add_bias=*/true, ctx.inference(), ctx.packed_weights());
  ctx.save(this, {input});
  return y;
}

Tensor Linear::backward_impl(const Tensor& dy, Context& ctx) {
  std::optional<kernels::PrecisionScope> fp32;
  if (weight_->kept_in_fp32()) fp32.emplace(kernels::Precision::F32);
  Tensor dx = backward_from(dy, ctx.saved(this, 0), /*bias_grad=*/true);
  ctx.release(this);
  return dx;
}

Tensor Linear::project(const Tensor& x, bool add_bias, bool few_rows, kernels::PackedWeights* packed) {
  check(x.ndim() >= 1 && x.size(-1) == in_, "Linear '", name(), "' expects last dimension ", in_,
        ", got shape ", shape_str(x.shape()));
  const int64_t N = x.numel() / in_;
  Shape out_shape = x.shape();
  out_shape.back() = out_;
  Tensor y = Tensor::empty(out_shape);  // (N, OC)
  const float* b = bias_ && add_bias ? bias_->value().f32() : nullptr;
  // The weight's operand is bf16 in bf16 precision.
  nn::project_rows(x, 0, weight_->gemm_operand(), b, y.f32(), N, out_, in_, few_rows, packed);
  return y;
}

Tensor Linear::backward_from(const Tensor& dy, const Tensor& x, bool bias_grad) {
  const int64_t N = x.numel() / in_;
  Tensor dx = Tensor::empty(x.shape(), DType::F32);  // (N, C)
  const bool with_bias = bias_ && bias_grad;
  // Converted once for both GEMMs, in the pass that sums the bias gradient.
  const Tensor dy_in = with_bias ? in_compute_precision_adding_bias_grad(dy, bias_->grad().f32(), out_)
                                 : in_compute_precision(dy);
  input_gradient_rows(gemm_input(dy_in), N, dx.f32());
  add_weight_gradient(gemm_input(dy_in), gemm_input(x), N);
  if (with_bias) bias_->grad_contributed();
  return dx;
}

void Linear::project_rows(kernels::Operand x, int64_t rows, float* y, bool add_bias) {
  kernels::matmul(x, Trans::N, weight_->gemm_operand(), Trans::T, y, rows, out_, in_,
                  bias_ && add_bias ? bias_->value().f32() : nullptr);
}

void Linear::input_gradient_rows(kernels::Operand dy, int64_t rows, float* dx) {
  kernels::matmul(dy, Trans::N, weight_->gemm_operand(), Trans::N, dx, rows, in_, out_);
}

void Linear::add_weight_gradient(kernels::Operand dy, kernels::Operand x, int64_t rows) {
  kernels::matmul(dy, Trans::T, x, Trans::N, weight_->grad().f32(), out_, in_, rows, nullptr, /*accumulate=*/true);
  weight_->grad_contributed();
}

}  // namespace loom::nn
