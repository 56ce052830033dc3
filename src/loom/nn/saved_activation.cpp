#include "loom/nn/saved_activation.hpp"

#include "loom/kernels/precision.hpp"
#include "loom/nn/gemm_input.hpp"

namespace loom::nn {

bool saved_in_bf16(const Context& ctx) {
  return !ctx.inference() && kernels::compute_precision() == kernels::Precision::BF16;
}

Tensor saved_activation(const Tensor& x, const Context& ctx) { return saved_in_bf16(ctx) ? in_compute_precision(x) : x; }

Tensor widened(const Tensor& t) {
  if (t.dtype() != DType::BF16) return t;
  Tensor f = Tensor::empty(t.shape(), DType::F32);
  kernels::convert_to_f32(t.bf16(), f.f32(), t.numel());
  return f;
}

}  // namespace loom::nn
