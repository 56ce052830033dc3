// oneDNN matmul wrappers against naive double loops: all transpose combinations, bias,
// accumulate, degenerate shapes, strided batched views with alpha, and the primitive cache
// (reuse, its bound, eviction while another thread runs the primitive).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "dnnl.hpp"
#include "loom/error.hpp"
#include "loom/kernels/matmul.hpp"
#include "loom/kernels/precision.hpp"
#include "test_util.hpp"

namespace loom::kernels {
namespace {

using loom::testing::all_close;
using loom::testing::random_vector;

// C(M, N) = op(A) op(B) [+ bias] [+ C0], in double.
std::vector<float> naive(const std::vector<float>& A, Trans ta, const std::vector<float>& B, Trans tb,
                         int64_t M, int64_t N, int64_t K, const float* bias, const std::vector<float>* C0) {
  std::vector<float> C(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = bias ? bias[j] : 0.0;
      if (C0) s += (*C0)[i * N + j];
      for (int64_t k = 0; k < K; ++k) {
        const double a = ta == Trans::N ? A[i * K + k] : A[k * M + i];
        const double b = tb == Trans::N ? B[k * N + j] : B[j * K + k];
        s += a * b;
      }
      C[i * N + j] = static_cast<float>(s);
    }
  return C;
}

struct Shape {
  int64_t M, N, K;
};

TEST(Matmul, AllTransposesBiasAndAccumulate) {
  // Tolerance: rtol 1e-5, atol 1e-5 (fp32 dot products of <= 37 terms against double).
  const Shape shapes[] = {{7, 13, 5}, {1, 9, 11}, {8, 1, 3}, {6, 4, 1}, {1, 1, 1}, {33, 17, 37}};
  for (const Shape& s : shapes) {
    for (Trans ta : {Trans::N, Trans::T}) {
      for (Trans tb : {Trans::N, Trans::T}) {
        const std::string what = "M " + std::to_string(s.M) + " N " + std::to_string(s.N) + " K " +
                                 std::to_string(s.K) + (ta == Trans::T ? " At" : " A") +
                                 (tb == Trans::T ? " Bt" : " B");
        const auto A = random_vector(s.M * s.K, 1), B = random_vector(s.K * s.N, 2);
        const auto bias = random_vector(s.N, 3), C0 = random_vector(s.M * s.N, 4);
        std::vector<float> C(s.M * s.N, 99.0f);
        matmul(A.data(), ta, B.data(), tb, C.data(), s.M, s.N, s.K);
        EXPECT_TRUE(all_close(C, naive(A, ta, B, tb, s.M, s.N, s.K, nullptr, nullptr), 1e-5, 1e-5, what));
        matmul(A.data(), ta, B.data(), tb, C.data(), s.M, s.N, s.K, bias.data());
        EXPECT_TRUE(
            all_close(C, naive(A, ta, B, tb, s.M, s.N, s.K, bias.data(), nullptr), 1e-5, 1e-5, what + " bias"));
        C = C0;
        matmul(A.data(), ta, B.data(), tb, C.data(), s.M, s.N, s.K, nullptr, true);
        EXPECT_TRUE(all_close(C, naive(A, ta, B, tb, s.M, s.N, s.K, nullptr, &C0), 1e-5, 1e-5, what + " acc"));
        C = C0;
        matmul(A.data(), ta, B.data(), tb, C.data(), s.M, s.N, s.K, bias.data(), true);
        EXPECT_TRUE(
            all_close(C, naive(A, ta, B, tb, s.M, s.N, s.K, bias.data(), &C0), 1e-5, 1e-5, what + " bias acc"));
      }
    }
  }
}

TEST(Matmul, BatchedStridedViewsWithAlpha) {
  // Heads read in place from a (B0, T, 3, B1, D) buffer as attention does: A = q (T, D),
  // B = k^T (D, T) by swapped strides, C written into (B0, T, B1, T) interleaved layout.
  // Tolerance: rtol 1e-5, atol 1e-5.
  const int64_t B0 = 2, B1 = 3, T = 5, D = 4, W = 3 * B1 * D;  // W: row width of the buffer
  const auto buf = random_vector(B0 * T * W, 5);
  BatchedMatmul d;
  d.batch0 = B0;
  d.batch1 = B1;
  d.M = T;
  d.N = T;
  d.K = D;
  d.a_strides = {T * W, D, W, 1};
  d.b_strides = {T * W, D, 1, W};
  d.c_strides = {T * B1 * T, T, B1 * T, 1};
  d.alpha = 0.5f;
  const float* q = buf.data();
  const float* k = buf.data() + B1 * D;
  std::vector<float> C(B0 * T * B1 * T, 1.0f), want(C.size());
  for (int64_t b0 = 0; b0 < B0; ++b0)
    for (int64_t b1 = 0; b1 < B1; ++b1)
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < T; ++j) {
          double s = 0.0;
          for (int64_t x = 0; x < D; ++x)
            s += static_cast<double>(q[b0 * T * W + b1 * D + i * W + x]) * k[b0 * T * W + b1 * D + j * W + x];
          want[b0 * T * B1 * T + b1 * T + i * B1 * T + j] = static_cast<float>(0.5 * s);
        }
  batched_matmul(d, q, k, C.data());
  EXPECT_TRUE(all_close(C, want, 1e-5, 1e-5, "batched"));
  d.accumulate = true;
  batched_matmul(d, q, k, C.data());
  for (auto& x : want) x *= 2.0f;
  EXPECT_TRUE(all_close(C, want, 1e-5, 1e-5, "batched accumulate"));
}

// A bf16 product is the exact product of the bf16-rounded operands summed in fp32, whether
// oneDNN multiplies bf16 itself or Loom widens the operands (native_bf16_matmul() false: an
// AVX2-only CPU, or ONEDNN_MAX_CPU_ISA=AVX2 as ctest's kernels.bf16_without_avx512 sets).
// Each product of two 8-bit mantissas is exact in fp32, so only the summation order differs
// from the double reference: rtol/atol 1e-5. Operands: fp32 rounded by the call, bf16 given,
// and a strided bf16 view (attention's q, k read in place from a saved bf16 qkv buffer).
TEST(Matmul, Bf16IsTheProductOfRoundedOperands) {
  const int64_t M = 7, N = 5, K = 33;
  std::vector<float> A = random_vector(M * K, 11), B = random_vector(K * N, 12);
  std::vector<bfloat16> A16(A.size()), B16(B.size());
  convert_to_bf16(A.data(), A16.data(), M * K);
  convert_to_bf16(B.data(), B16.data(), K * N);
  std::vector<float> Ar(A.size()), Br(B.size());
  convert_to_f32(A16.data(), Ar.data(), M * K);
  convert_to_f32(B16.data(), Br.data(), K * N);
  std::vector<float> rounded = A;  // in one pass, in place: the same values
  round_to_bf16_values(rounded.data(), rounded.data(), M * K);
  EXPECT_EQ(rounded, Ar);
  const std::vector<float> want = naive(Ar, Trans::N, Br, Trans::N, M, N, K, nullptr, nullptr);
  std::vector<float> C(M * N);
  {
    const PrecisionScope bf16(Precision::BF16);
    matmul(A.data(), Trans::N, B.data(), Trans::N, C.data(), M, N, K);
  }
  EXPECT_TRUE(all_close(C, want, 1e-5, 1e-5, "fp32 operands rounded"));
  matmul(A16.data(), Trans::N, B16.data(), Trans::N, C.data(), M, N, K);
  EXPECT_TRUE(all_close(C, want, 1e-5, 1e-5, "bf16 operands"));
  EXPECT_FALSE(all_close(C, naive(A, Trans::N, B, Trans::N, M, N, K, nullptr, nullptr), 1e-5, 1e-5, "unrounded"));

  // q k^T per head from a bf16 (T, 2 heads x D) buffer read in place.
  const int64_t T = 6, H = 2, D = 8, W = H * D;
  BatchedMatmul d;
  d.batch1 = H;
  d.M = d.N = T;
  d.K = D;
  d.a_strides = {T * W, D, W, 1};
  d.b_strides = {T * W, D, 1, W};
  d.c_strides = {H * T * T, T * T, T, 1};
  std::vector<float> qkv = random_vector(T * W, 13), wide(qkv.size()), scores(H * T * T), expected(H * T * T);
  std::vector<bfloat16> qkv16(qkv.size());
  convert_to_bf16(qkv.data(), qkv16.data(), T * W);
  convert_to_f32(qkv16.data(), wide.data(), T * W);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j) {
        double s = 0.0;
        for (int64_t x = 0; x < D; ++x) s += static_cast<double>(wide[i * W + h * D + x]) * wide[j * W + h * D + x];
        expected[(h * T + i) * T + j] = static_cast<float>(s);
      }
  batched_matmul(d, qkv16.data(), qkv16.data(), scores.data());
  EXPECT_TRUE(all_close(scores, expected, 1e-5, 1e-5, "strided bf16 views"));
}

// From kRepackMinRows rows on, a product reads B reordered into oneDNN's preferred layout where
// this CPU's kernel takes blocked weights: the same product, in fp32 and bf16 (rounded operands;
// where oneDNN has no bf16 matmul, the widened operands' fp32 product is the one repacked), for B
// stored either way, with bias and accumulation, K odd (bf16's pairs along K padded), the first
// call twice (the cached primitive and reorder reused). Against double: rtol/atol 1e-5, since
// each product of two bf16-exact values is exact in fp32 and only the 73 additions round (each
// by at most 2^-24 of a partial sum below ~5, ~3e-6 over the sum typically), while a wrong layout
// gives O(1) errors. Counted, so that a path silently left plain fails here (on this CPU's
// kernels: matmul_reads_blocked_weights). A transposed A repacks in bf16 only; fewer rows never.
TEST(Matmul, ProductsOnManyRowsReadBRepacked) {
  const int64_t M = kRepackMinRows, N = 40, K = 73;
  std::vector<float> A = random_vector(M * K, 21), B = random_vector(K * N, 22), bias = random_vector(N, 23);
  std::vector<float> C0 = random_vector(M * N, 24);
  round_to_bf16_values(A.data(), A.data(), M * K);
  round_to_bf16_values(B.data(), B.data(), K * N);
  auto repacks = [](Precision p) {  // products repacked per call in this precision on this CPU
    const bool bf16_kernel = p == Precision::BF16 && native_bf16_matmul();
    return matmul_reads_blocked_weights(bf16_kernel) ? 1 : 0;
  };
  const int64_t before = matmul_repacked_products();
  int64_t expected = 0;
  for (const Precision precision : {Precision::F32, Precision::BF16})
    for (const Trans tb : {Trans::N, Trans::N, Trans::T}) {
      const PrecisionScope scope(precision);
      std::vector<float> C = C0;
      matmul(A.data(), Trans::N, B.data(), tb, C.data(), M, N, K, bias.data(), /*accumulate=*/true);
      EXPECT_TRUE(all_close(C, naive(A, Trans::N, B, tb, M, N, K, bias.data(), &C0), 1e-5, 1e-5, "repacked B"));
      expected += repacks(precision);
    }
  // The same product with A stored transposed (K, M), as a weight gradient reads dY^T.
  std::vector<float> At(K * M);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) At[k * M + m] = A[m * K + k];
  for (const Precision precision : {Precision::F32, Precision::BF16}) {
    const PrecisionScope scope(precision);
    std::vector<float> C(M * N);
    matmul(At.data(), Trans::T, B.data(), Trans::N, C.data(), M, N, K);
    EXPECT_TRUE(all_close(C, naive(A, Trans::N, B, Trans::N, M, N, K, nullptr, nullptr), 1e-5, 1e-5, "A transposed"));
    if (precision == Precision::BF16) expected += repacks(precision);
  }
  EXPECT_EQ(matmul_repacked_products() - before, expected);

  const PrecisionScope bf16(Precision::BF16);
  std::vector<float> C(M * N);
  matmul(A.data(), Trans::N, B.data(), Trans::N, C.data(), M - 1, N, K);  // one row fewer
  const std::vector<float> want = naive(A, Trans::N, B, Trans::N, M - 1, N, K, nullptr, nullptr);
  EXPECT_TRUE(all_close(std::vector<float>(C.begin(), C.end() - N), want, 1e-5, 1e-5, "M - 1 rows"));
  std::vector<float> dY = C0, dW(K * N);
  round_to_bf16_values(dY.data(), dY.data(), M * N);
  matmul(A.data(), Trans::T, dY.data(), Trans::N, dW.data(), K, N, M);  // a weight gradient's shape
  // 1024-term sums: rtol/atol 1e-4.
  EXPECT_TRUE(all_close(dW, naive(A, Trans::T, dY, Trans::N, K, N, M, nullptr, nullptr), 1e-4, 1e-4, "dW"));
  EXPECT_EQ(matmul_repacked_products() - before, expected);
}

// Products whose row count (a mixture of experts' projections) or inner dimension (their
// weight gradients) changes from call to call compute the same products, in fp32 and bf16
// (operands rounded to bf16 values first, so the reference is exact up to the sums: rtol/atol
// 1e-5 as above, at most 61 terms), with bias and accumulation, B stored either way, one row
// or term included; where this CPU's oneDNN takes the dimension at run time
// (matmul_varying_shares_primitive) all of a family's calls share one primitive, otherwise
// each shape creates its own, as a fixed product's. Without a oneDNN bf16 matmul (an AVX2 CPU)
// the bf16 products are the widened operands' fp32 ones, through the fp32 pass's primitives.
TEST(Matmul, VaryingDimensionComputesTheProductThroughOnePrimitive) {
  const int64_t fixed_a = 29, fixed_b = 31;  // shapes no other test uses
  for (const Precision precision : {Precision::F32, Precision::BF16}) {
    const PrecisionScope scope(precision);
    const bool widened = precision == Precision::BF16 && !native_bf16_matmul();
    const bool shares = matmul_varying_shares_primitive(precision == Precision::BF16 && !widened);
    const std::string what(precision_name(precision));
    auto created = [&](size_t shapes) { return widened ? 0 : shares ? 1 : static_cast<int64_t>(shapes); };
    auto data = [](int64_t n, uint64_t seed) {
      std::vector<float> v = random_vector(n, seed);
      round_to_bf16_values(v.data(), v.data(), n);
      return v;
    };
    const std::vector<int64_t> sizes{1, 7, 61, 40};
    for (const Trans tb : {Trans::N, Trans::T}) {  // rows vary: y (M, N) = x (M, K) op(W) + bias
      const int64_t N = fixed_a, K = fixed_b;
      const std::vector<float> B = data(K * N, 51), bias = random_vector(N, 52);
      const int64_t before = matmul_primitive_count();
      for (const int64_t M : sizes) {
        const std::vector<float> A = data(M * K, 53 + M);
        std::vector<float> C(M * N);
        matmul(A.data(), Trans::N, B.data(), tb, C.data(), M, N, K, bias.data(), false, Varying::Rows);
        EXPECT_TRUE(all_close(C, naive(A, Trans::N, B, tb, M, N, K, bias.data(), nullptr), 1e-5, 1e-5,
                              what + " rows " + std::to_string(M)));
      }
      EXPECT_EQ(matmul_primitive_count() - before, created(sizes.size())) << what;
    }
    // The inner dimension varies: dW (M, N) += dy^T (M, K) x (K, N), dy stored (K, M).
    const int64_t M = fixed_b, N = fixed_a;
    const std::vector<float> C0 = random_vector(M * N, 60);
    const int64_t before = matmul_primitive_count();
    for (const int64_t K : sizes) {
      const std::vector<float> At = data(K * M, 61 + K), B = data(K * N, 62 + K);
      std::vector<float> C = C0;
      matmul(At.data(), Trans::T, B.data(), Trans::N, C.data(), M, N, K, nullptr, /*accumulate=*/true, Varying::Inner);
      EXPECT_TRUE(all_close(C, naive(At, Trans::T, B, Trans::N, M, N, K, nullptr, &C0), 1e-5, 1e-5,
                            what + " inner " + std::to_string(K)));
    }
    EXPECT_EQ(matmul_primitive_count() - before, created(sizes.size())) << what;
  }
}

TEST(Matmul, PrimitiveCacheReusesSameShape) {
  const int64_t M = 3, N = 19, K = 23;  // a shape no other test uses
  const auto A = random_vector(M * K, 6), B = random_vector(K * N, 7);
  std::vector<float> C(M * N);
  matmul(A.data(), Trans::N, B.data(), Trans::N, C.data(), M, N, K);
  const int64_t after_first = matmul_primitive_count();
  for (int i = 0; i < 3; ++i) matmul(A.data(), Trans::N, B.data(), Trans::N, C.data(), M, N, K);
  EXPECT_EQ(matmul_primitive_count(), after_first);
  matmul(A.data(), Trans::N, B.data(), Trans::N, C.data(), M, N, K, nullptr, true);  // new options
  EXPECT_EQ(matmul_primitive_count(), after_first + 1);
}

// Sets the primitive caches' capacity for a test, restoring it after.
class PrimitiveCapacityScope {
 public:
  explicit PrimitiveCapacityScope(int64_t capacity) : saved_(matmul_primitive_capacity()) {
    set_matmul_primitive_capacity(capacity);
  }
  ~PrimitiveCapacityScope() { set_matmul_primitive_capacity(saved_); }
  PrimitiveCapacityScope(const PrimitiveCapacityScope&) = delete;
  PrimitiveCapacityScope& operator=(const PrimitiveCapacityScope&) = delete;

 private:
  int64_t saved_;
};

// A product with M rows of a shape no other test uses, checked against double; returns how
// many primitives it created.
int64_t checked_product(int64_t M) {
  const int64_t N = 37, K = 41;
  const auto A = random_vector(M * K, 70 + M), B = random_vector(K * N, 71);
  std::vector<float> C(M * N);
  const int64_t before = matmul_primitive_count();
  matmul(A.data(), Trans::N, B.data(), Trans::N, C.data(), M, N, K);
  EXPECT_TRUE(all_close(C, naive(A, Trans::N, B, Trans::N, M, N, K, nullptr, nullptr), 1e-5, 1e-5,
                        "rows " + std::to_string(M)));
  return matmul_primitive_count() - before;
}

// The cache holds at most its capacity, dropping the least recently used: generation meets a
// new shape at every new prompt length, and each primitive holds ~50-110 KB of JIT code.
TEST(Matmul, PrimitiveCacheKeepsTheMostRecentlyUsedUpToItsCapacity) {
  if (std::getenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY") == nullptr && std::getenv("DNNL_PRIMITIVE_CACHE_CAPACITY") == nullptr) {
    EXPECT_EQ(matmul_primitive_capacity(), 256);
    EXPECT_EQ(dnnl::get_primitive_cache_capacity(), 256);
  }
  const PrimitiveCapacityScope scope(3);
  EXPECT_EQ(dnnl::get_primitive_cache_capacity(), 3);  // oneDNN's cache is bounded with it
  for (const int64_t M : {1, 2, 3}) EXPECT_EQ(checked_product(M), 1) << M;
  EXPECT_EQ(matmul_cached_primitives(), 3);
  EXPECT_EQ(checked_product(1), 0);  // found, and now the most recent
  EXPECT_EQ(checked_product(4), 1);  // evicts 2, the least recently used
  EXPECT_EQ(matmul_cached_primitives(), 3);
  EXPECT_EQ(checked_product(1), 0);
  EXPECT_EQ(checked_product(3), 0);
  EXPECT_EQ(checked_product(2), 1);  // made again, the same product
  EXPECT_EQ(matmul_cached_primitives(), 3);
  EXPECT_THROW(set_matmul_primitive_capacity(0), Error);
}

// Threads of a parallel region (attention's shares) run products of their own shapes while
// others evict them from a cache of one: each primitive stays alive while it runs.
TEST(Matmul, APrimitiveEvictedWhileRunningFinishesItsProduct) {
  const PrimitiveCapacityScope scope(1);
  std::vector<int> ok(16, 0);
#pragma omp parallel for num_threads(4) schedule(dynamic)
  for (int i = 0; i < 16; ++i) {
    const int64_t M = 8 + i % 5, N = 43, K = 47;
    const auto A = random_vector(M * K, 80 + i), B = random_vector(K * N, 81);
    std::vector<float> C(M * N);
    matmul(A.data(), Trans::N, B.data(), Trans::N, C.data(), M, N, K);
    const std::vector<float> expected = naive(A, Trans::N, B, Trans::N, M, N, K, nullptr, nullptr);
    ok[i] = 1;
    for (int64_t j = 0; j < M * N; ++j) ok[i] &= std::abs(C[j] - expected[j]) <= 1e-5f * (1.0f + std::abs(expected[j]));
  }
  for (int i = 0; i < 16; ++i) EXPECT_EQ(ok[i], 1) << "product " << i;
  EXPECT_LE(matmul_cached_primitives(), 1);
}

}  // namespace
}  // namespace loom::kernels
