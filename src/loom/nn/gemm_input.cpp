#include "loom/nn/gemm_input.hpp"

#include "loom/kernels/precision.hpp"
#include "loom/kernels/residual.hpp"

namespace loom::nn {

kernels::Operand gemm_input(const Tensor& t) {
  return t.dtype() == DType::BF16 ? kernels::Operand(t.bf16()) : kernels::Operand(t.f32());
}

kernels::Operand gemm_input(const Tensor& t, int64_t offset) { return gemm_input(t).at(offset); }

Tensor in_compute_precision(const Tensor& x) {
  if (kernels::compute_precision() != kernels::Precision::BF16 || x.dtype() == DType::BF16) return x;
  Tensor b = Tensor::empty(x.shape(), DType::BF16);
  kernels::convert_to_bf16(x.f32(), b.bf16(), x.numel());
  return b;
}

Tensor in_compute_precision_adding_bias_grad(const Tensor& dy, float* dbias, int64_t columns) {
  const int64_t rows = dy.numel() / columns;
  if (kernels::compute_precision() != kernels::Precision::BF16) {
    kernels::bias_backward(dbias, dy.f32(), rows, columns);
    return dy;
  }
  Tensor b = Tensor::empty(dy.shape(), DType::BF16);
  kernels::bias_backward(dbias, dy.f32(), rows, columns, b.bf16());
  return b;
}

}  // namespace loom::nn
