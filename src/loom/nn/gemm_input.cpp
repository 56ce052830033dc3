#include "loom/nn/gemm_input.hpp"

#include "loom/kernels/gemv.hpp"
#include "loom/kernels/matmul.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/kernels/residual.hpp"

namespace loom::nn {

kernels::Operand gemm_input(const Tensor& t) {
  return t.dtype() == DType::BF16 ? kernels::Operand(t.bf16()) : kernels::Operand(t.f32());
}

kernels::Operand gemm_input(const Tensor& t, int64_t offset) { return gemm_input(t).at(offset); }

void project_rows(const Tensor& x, int64_t offset, kernels::Operand w, const float* bias, float* y, int64_t rows,
                  int64_t out, int64_t in, bool few_rows, kernels::PackedWeights* packed, kernels::Varying varying) {
  const bool fp32_decode = few_rows && x.dtype() == DType::F32;
  if (fp32_decode && rows <= kernels::kGemvMaxRows)
    kernels::gemv_rows(x.f32() + offset, w, bias, y, rows, out, in);
  else if (fp32_decode && packed != nullptr && rows <= kernels::kPackedMaxRows)
    packed->matmul(x.f32() + offset, w, bias, y, rows, out, in);
  else
    kernels::matmul(gemm_input(x, offset), kernels::Trans::N, w, kernels::Trans::T, y, rows, out, in, bias, false,
                    few_rows ? prefill_rows(w.dtype == DType::BF16 || x.dtype() == DType::BF16, varying) : varying);
}

kernels::Varying prefill_rows(bool bf16, kernels::Varying varying) {
  // A prefill's row count is its prompt's length, new with nearly every request: a primitive per
  // length (about 2 MB of JIT code each at width 768) filled the cache for hundreds of lengths.
  // Where the fixed-shape kernel is the run-time one anyway (no blocked weights: AVX2's gemm),
  // one primitive takes every length at no cost; AVX-512's fixed-shape brgemm stays (faster).
  return kernels::matmul_reads_blocked_weights(bf16) ? varying : kernels::Varying::Rows;
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
