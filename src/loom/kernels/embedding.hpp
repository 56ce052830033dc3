// Token + learned position embedding (GPT-2's wte/wpe), fused: out = wte[inp] + wpe[t].
#pragma once

#include <cstdint>

namespace loom::kernels {

// out (B, T, C); inp (B, T) token ids in [0, V); wte (V, C); wpe (maxT >= T, C).
// Throws loom::Error naming the id when a token id is out of range.
void embedding_forward(float* out, const int32_t* inp, const float* wte, const float* wpe,
                       int64_t B, int64_t T, int64_t C, int64_t V);
// Accumulates: dwte (V, C) += scatter of dout rows by token id; dwpe (maxT, C) += sum over B.
// Deterministic: rows of the same id are added in (b, t) order.
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp,
                        int64_t B, int64_t T, int64_t C);

}  // namespace loom::kernels
