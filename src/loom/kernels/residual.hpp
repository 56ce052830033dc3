// Residual add and element-wise helpers used around it.
#pragma once

#include <cstdint>

#include "loom/tensor/dtype.hpp"

namespace loom::kernels {

// out = a + b, all (n); out may alias a or b.
void residual_forward(float* out, const float* a, const float* b, int64_t n);
// The gradient of a sum flows to both inputs: dst += src, both (n).
void add_inplace(float* dst, const float* src, int64_t n);
// dst *= s, (n).
void scale_inplace(float* dst, float s, int64_t n);
// Sum of squares of x (n), in double for a stable global norm.
double sum_squares(const float* x, int64_t n);
// dbias (OC) += sum over rows of dout (N, OC): the bias gradient of a Linear layer. With
// dout_bf16 (N, OC), dout is also written there in bf16 (as convert_to_bf16 rounds) in the same
// pass: a Linear's backward under mixed precision reads its output gradient once for the bias
// and its GEMMs' operand; dbias is the same bit for bit either way.
void bias_backward(float* dbias, const float* dout, int64_t N, int64_t OC, bfloat16* dout_bf16 = nullptr);

}  // namespace loom::kernels
