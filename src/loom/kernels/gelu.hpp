// GELU, tanh approximation (GPT-2's, PyTorch's approximate="tanh").
#pragma once

#include <cstdint>

#include "loom/tensor/dtype.hpp"

namespace loom::kernels {

// out, inp (n); out may alias inp.
void gelu_forward(float* out, const float* inp, int64_t n);
// dinp = gelu'(inp) * dout, overwritten; dinp may alias dout.
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);

// Mixed precision, one pass: out = gelu(inp) and kept = bf16(inp), what backward reads
// (rounded to nearest even as to_bf16); out may alias inp.
void gelu_forward(float* out, bfloat16* kept, const float* inp, int64_t n);
// The same with the output in bf16 too (the next GEMM's operand, rounded as to_bf16 rounds the
// fp32 output): one pass where an fp32 output would be written, read back and rounded.
void gelu_forward(bfloat16* out, bfloat16* kept, const float* inp, int64_t n);
// gelu_backward on the input kept in bf16 (widened exactly, the derivative in fp32).
void gelu_backward(float* dinp, const bfloat16* inp, const float* dout, int64_t n);

}  // namespace loom::kernels
