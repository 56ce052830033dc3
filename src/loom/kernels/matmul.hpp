// GEMM through oneDNN's matmul primitive (never hand-written). Primitives are created
// once per (shape, strides, options, thread count) and cached, since creation costs far
// more than a small multiply. fp32 today; operands carry no dtype yet so bf16 (AMX) can
// be added as another entry point.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace loom::kernels {

enum class Trans { N, T };

// C(M, N) = op(A) @ op(B) [+ bias(N)] [+ C when accumulate].
// A is (M, K) row-major, or stored (K, M) when ta == T; B is (K, N), or stored (N, K) when tb == T.
void matmul(const float* A, Trans ta, const float* B, Trans tb, float* C, int64_t M, int64_t N,
            int64_t K, const float* bias = nullptr, bool accumulate = false);

// A batch of (B0 x B1) matmuls with arbitrary element strides, for attention heads read in
// place from a (B, T, 3C) buffer. Strides are {batch0, batch1, row, col} in elements.
struct BatchedMatmul {
  int64_t batch0 = 1, batch1 = 1;
  int64_t M = 0, N = 0, K = 0;
  std::array<int64_t, 4> a_strides{};  // A: (batch0, batch1, M, K)
  std::array<int64_t, 4> b_strides{};  // B: (batch0, batch1, K, N)
  std::array<int64_t, 4> c_strides{};  // C: (batch0, batch1, M, N)
  float alpha = 1.0f;                  // C = alpha * A @ B
  bool accumulate = false;             // C += ...
};
void batched_matmul(const BatchedMatmul& desc, const float* A, const float* B, float* C);

// The instruction set oneDNN runs its kernels with ("avx512_core_amx", ...), printed next
// to every performance figure.
std::string cpu_isa_name();

// Number of distinct primitives created so far (tests check that the cache works).
int64_t matmul_primitive_count();

}  // namespace loom::kernels
