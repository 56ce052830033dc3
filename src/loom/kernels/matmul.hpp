// GEMM through oneDNN's matmul primitive (never hand-written). Primitives are created
// once per (shape, strides, dtypes, options, thread count) and cached, since creation costs
// far more than a small multiply.
// Precision: the product runs in bf16 (bf16 operands, fp32 accumulation, fp32 result) when
// an operand is bf16 or the compute precision (precision.hpp) is bf16; an fp32 operand is
// then converted on the way in (activations; weights arrive already converted, cached by
// their Parameter). Otherwise in fp32.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "loom/tensor/dtype.hpp"

namespace loom::kernels {

enum class Trans { N, T };

// A GEMM input: fp32 or bf16 elements.
struct Operand {
  Operand(const float* p) : data(p), dtype(DType::F32) {}        // NOLINT: implicit on purpose
  Operand(const bfloat16* p) : data(p), dtype(DType::BF16) {}    // NOLINT
  // The same operand from element `offset` on (one matrix of a stacked tensor).
  Operand at(int64_t offset) const {
    return dtype == DType::BF16 ? Operand(static_cast<const bfloat16*>(data) + offset)
                                : Operand(static_cast<const float*>(data) + offset);
  }
  const void* data;
  DType dtype;
};

// n contiguous values of src into dst: copied when bf16, rounded (as to_bf16) when fp32. On
// the calling thread alone, for a run inside a caller's parallel loop.
void copy_run_to_bf16(Operand src, bfloat16* dst, int64_t n);

// Which dimension of a product changes from call to call: a mixture of experts' row counts
// per expert change every step, M of its projections and K of its weight gradients. A primitive
// per exact shape would mean creating one (about a millisecond, single-threaded) for nearly
// every such call and caching each for good; these products share one primitive with that
// dimension given at run time instead, where this CPU's oneDNN has one as fast
// (matmul_varying_shares_primitive; measured in matmul.cpp).
enum class Varying { None, Rows, Inner };

// C(M, N) = op(A) @ op(B) [+ bias(N)] [+ C when accumulate].
// A is (M, K) row-major, or stored (K, M) when ta == T; B is (K, N), or stored (N, K) when tb == T.
void matmul(Operand A, Trans ta, Operand B, Trans tb, float* C, int64_t M, int64_t N,
            int64_t K, const float* bias = nullptr, bool accumulate = false, Varying varying = Varying::None);

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
void batched_matmul(const BatchedMatmul& desc, Operand A, Operand B, float* C);

// The instruction set oneDNN runs its kernels with ("avx512_core_amx", ...), printed next
// to every performance figure.
std::string cpu_isa_name();

// Whether this CPU's oneDNN multiplies bf16 operands itself: it needs AVX-512 (natively with
// AVX512-BF16 or AMX, emulated on plain AVX-512 cores). Without it (an AVX2-only CPU) a bf16
// product widens its bf16 operands to fp32, exactly, and multiplies them in fp32: each product
// of two bf16 values is exact in fp32, so the result is the bf16 GEMM's up to summation order.
bool native_bf16_matmul();

// The line to print when bf16 GEMMs are slower than fp32 on this CPU (bf16_slower_than_fp32 in
// precision.hpp), saying how bf16 runs here; "" otherwise.
std::string bf16_speed_warning();

// Primitives are cached by exact geometry, the least recently used dropped past a capacity,
// oneDNN's own cache's too: 256, or ONEDNN_PRIMITIVE_CACHE_CAPACITY where set (at least 1).
// matmul_primitive_count(): primitives created so far (tests check that the cache works);
// matmul_cached_primitives(): those held now; set_matmul_primitive_capacity(): both caches'.
int64_t matmul_primitive_count();
int64_t matmul_cached_primitives();
int64_t matmul_primitive_capacity();
void set_matmul_primitive_capacity(int64_t capacity);
// Whether products of a Varying dimension share one primitive in this precision on this CPU:
// oneDNN has a kernel taking the dimension at run time, not a reference one, and not in place
// of AMX tiles (oneDNN 2.6 has those in its fixed-shape kernel only). Otherwise each shape
// gets its own primitive, as a fixed product's.
bool matmul_varying_shares_primitive(bool bf16);

// A product with at least this many rows, A's rows contiguous (ta == N; in bf16 either way)
// and not inside a parallel region reads B through a reorder into the blocked layout oneDNN's
// kernel prefers, made for the call (see matmul.cpp for the measurements), where this CPU's
// kernel for that precision takes blocked weights (matmul_reads_blocked_weights: brgemm on
// AVX-512, not the AVX2 fp32 gemm); the result is the same product. matmul_repacked_products():
// the count of such products so far (tests).
inline constexpr int64_t kRepackMinRows = 1024;
bool matmul_reads_blocked_weights(bool bf16);
int64_t matmul_repacked_products();
// The implementation oneDNN chose for an (M, K) x (K, N) product in this precision, e.g.
// "brg:avx512_core_amx" (the ISA it dispatched); for bf16 without native_bf16_matmul(), the
// fp32 implementation that multiplies the widened operands, named as such.
std::string matmul_implementation(int64_t M, int64_t N, int64_t K, bool bf16);

}  // namespace loom::kernels
