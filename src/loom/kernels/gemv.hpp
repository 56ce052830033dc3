// The decode step's projections: y(M, N) = x(M, K) W(N, K)^T [+ b(N)] for a handful of rows
// (one new token per sequence being generated). At such M the multiply is bound by reading
// W once from memory; this kernel streams each weight row once and forms all M dot
// products while it sits in L1. Parallel over output features, each dot product summed by
// one thread in k order, so the result does not depend on the thread count.
#pragma once

#include <cstdint>

#include "loom/kernels/matmul.hpp"
#include "loom/tensor/dtype.hpp"

namespace loom::kernels {

// Rows up to which the Linear layers' forward uses gemv_rows instead of oneDNN's matmul
// (measured single-threaded on gpt2-small shapes: 1.35-1.6x oneDNN at M = 1, 1.2-1.4x at
// M = 4 with the AVX-512 blocks, about equal at M = 8, oneDNN faster at 16; `loom bench
// generate` prints both at M = 1).
constexpr int64_t kGemvMaxRows = 4;

void gemv_rows(const float* x, const float* W, const float* bias, float* y, int64_t M, int64_t N, int64_t K);
// bf16 weights (half the bytes streamed): x is rounded to bf16 first, as oneDNN's bf16
// matmul reads its fp32 inputs, each product is then exact in fp32 and summed in fp32 in
// the same order as above. Plain C++ the compiler vectorizes (a bf16 widens to fp32 by a
// shift), so it runs on any CPU; at these M the multiply waits on memory, not arithmetic.
void gemv_rows(const float* x, const bfloat16* W, const float* bias, float* y, int64_t M, int64_t N, int64_t K);
// The portable loop of the above, whatever the build's target (tests compare the two).
void gemv_rows_portable(const float* x, const bfloat16* W, const float* bias, float* y, int64_t M, int64_t N, int64_t K);
// W as a GEMM operand (a Parameter's gemm_operand): either of the above.
void gemv_rows(const float* x, Operand W, const float* bias, float* y, int64_t M, int64_t N, int64_t K);

}  // namespace loom::kernels
