// Activations a layer keeps in its Context for backward, in the run's activation precision.
// Under bf16 mixed precision they are kept as bf16 copies (half the bytes), as Megatron-LM and
// torch.autocast keep what their bf16 layers save; compute never runs on them in bf16: a GEMM
// reads the bf16 copy as its operand, and everything else (LayerNorm, GELU and softmax
// backward) reads them widened back to fp32. In fp32, and in inference contexts (no backward
// follows), the activation itself is kept, so fp32 runs are unchanged.
#pragma once

#include "loom/nn/context.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom::nn {

// Whether ctx keeps its activations in bf16: bf16 mixed precision, and a backward follows.
// (A kernel that can write the bf16 copy itself, in the pass that reads the activation, asks.)
bool saved_in_bf16(const Context& ctx);
// What to save of activation x: x itself, or its bf16 copy under bf16 mixed precision.
Tensor saved_activation(const Tensor& x, const Context& ctx);

// A saved activation in fp32 for non-GEMM compute: t itself when fp32, else a widened copy
// (a temporary of backward, one layer's worth at a time).
Tensor widened(const Tensor& t);

}  // namespace loom::nn
