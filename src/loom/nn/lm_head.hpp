// The tied LM head's GEMMs, W (V, C) the token table (this rank's vocabulary rows under tensor
// parallelism) and h (N, C) the final LayerNorm's output: logits = h W^T; in backward
// dh = dlogits W and W's gradient += dlogits^T h. The serial head (LayerBuilder's) runs them
// back to back; the tensor-parallel head runs its collectives between and under them.
#pragma once

#include <cstdint>
#include <functional>

#include "loom/kernels/matmul.hpp"
#include "loom/nn/parameter.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom::nn {

// Under bf16 the backward reads the logits' gradient as bf16 GEMM operands, converted this
// many rows at a time, so that no whole bf16 copy (2 bytes a logit) sits beside the fp32
// logits at the step's peak.
inline constexpr int64_t kHeadGradientRows = 1024;

// logits (rows, V) = h W^T for `rows` rows of h.
void head_logits_rows(kernels::Operand h, int64_t rows, Parameter& w, float* logits);
// The same over all of h (..., C) -> (..., V).
Tensor head_logits(const Tensor& h, Parameter& w);
// dh (N, C) = dlogits W; dlogits holds N rows of V.
void head_input_gradient(const Tensor& dlogits, Parameter& w, float* dh);
// W's gradient += dlogits^T h (h: (N, C), fp32 or its bf16 copy), the rows in order.
void head_weight_gradient(const Tensor& dlogits, const Tensor& h, Parameter& w);
// Both, a piece of rows at a time: each piece of dlogits converted to bf16 once for its two
// GEMMs (the same bits as the two calls above). rows_done(r0, n), when given, runs between a
// piece's two GEMMs, once dh's rows [r0, r0 + n) are final: a tensor-parallel head starts
// their sum over its group there, under the piece's weight-gradient GEMM.
void head_gradients(const Tensor& dlogits, const Tensor& h, Parameter& w, float* dh,
                    const std::function<void(int64_t r0, int64_t n)>& rows_done = {});

}  // namespace loom::nn
