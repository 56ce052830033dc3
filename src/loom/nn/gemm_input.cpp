#include "loom/nn/gemm_input.hpp"

#include "loom/kernels/gemv.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/kernels/residual.hpp"

namespace loom::nn {

kernels::Operand gemm_input(const Tensor& t) {
  return t.dtype() == DType::BF16 ? kernels::Operand(t.bf16()) : kernels::Operand(t.f32());
}

kernels::Operand gemm_input(const Tensor& t, int64_t offset) { return gemm_input(t).at(offset); }

void project_rows(const Tensor& x, int64_t offset, kernels::Operand w, const float* bias, float* y, int64_t rows,
                  int64_t out, int64_t in, bool few_rows, kernels::PackedWeights* packed, kernels::Varying varying) {
  few_rows = few_rows && x.dtype() == DType::F32;
  if (few_rows && rows <= kernels::kGemvMaxRows)
    kernels::gemv_rows(x.f32() + offset, w, bias, y, rows, out, in);
  else if (few_rows && packed != nullptr && rows <= kernels::kPackedMaxRows)
    packed->matmul(x.f32() + offset, w, bias, y, rows, out, in);
  else
    kernels::matmul(gemm_input(x, offset), kernels::Trans::N, w, kernels::Trans::T, y, rows, out, in, bias, false, varying);
}

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
