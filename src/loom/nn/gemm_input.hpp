// Activations as GEMM inputs in the run's compute precision (kernels/precision.hpp).
#pragma once

#include "loom/kernels/matmul.hpp"
#include "loom/kernels/packed_weights.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom::nn {

// A GEMM operand over a tensor of either floating type.
kernels::Operand gemm_input(const Tensor& t);
// The same from element `offset` on (the rows of a piece of t).
kernels::Operand gemm_input(const Tensor& t, int64_t offset);

// y (rows, out) = x's rows from element `offset` on times W^T (W: out x in), + bias (or none):
// a decode step's few fp32 rows (few_rows: an inference context) through the GEMV or the
// packed copies of W, everything else through oneDNN's matmul (`varying`: Rows where the row
// count changes from call to call, as an expert's). Every layer's product with a weight takes
// this one choice (Linear, the experts).
void project_rows(const Tensor& x, int64_t offset, kernels::Operand w, const float* bias, float* y, int64_t rows,
                  int64_t out, int64_t in, bool few_rows, kernels::PackedWeights* packed,
                  kernels::Varying varying = kernels::Varying::None);
// The Varying of an inference context's product through oneDNN (a prefill's, whose rows are a
// prompt's length): Rows where this CPU's fixed-shape kernel takes no blocked weights
// (kernels::matmul_reads_blocked_weights), else `varying`.
kernels::Varying prefill_rows(bool bf16, kernels::Varying varying);

// x itself in fp32 (or when already bf16); in bf16 mixed precision a bf16 copy, made once
// where several GEMMs read x or backward keeps it (half the memory of the fp32 one).
Tensor in_compute_precision(const Tensor& x);
// A layer's output gradient dy (fp32, `columns` wide) as in_compute_precision gives it, after
// adding its column sums (the bias gradient) to dbias: in bf16 both come from one pass over dy.
Tensor in_compute_precision_adding_bias_grad(const Tensor& dy, float* dbias, int64_t columns);

}  // namespace loom::nn
