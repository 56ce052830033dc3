// GELU, tanh approximation (GPT-2's, PyTorch's approximate="tanh").
#pragma once

#include <cstdint>

namespace loom::kernels {

// out, inp (n); out may alias inp.
void gelu_forward(float* out, const float* inp, int64_t n);
// dinp = gelu'(inp) * dout, overwritten; dinp may alias dout.
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);

}  // namespace loom::kernels
