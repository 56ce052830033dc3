// LayerNorm over the last dimension (eps 1e-5, as PyTorch), fused forward and backward.
#pragma once

#include <cstdint>

#include "loom/tensor/dtype.hpp"

namespace loom::kernels {

constexpr float kLayerNormEps = 1e-5f;

// out (N, C); mean, rstd (N) saved for backward; inp (N, C); weight, bias (C). kept (N, C),
// when given: bf16(inp) written in the same pass (mixed precision keeps the input so).
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C, bfloat16* kept = nullptr);
// dinp (N, C) overwritten; dweight, dbias (C) accumulated.
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C);
// The same from the input kept in bf16 (widened exactly; the arithmetic in fp32).
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const bfloat16* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C);

}  // namespace loom::kernels
