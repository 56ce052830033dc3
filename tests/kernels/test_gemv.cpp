// The few-rows GEMV against oneDNN's matmul (relative 1e-5 of the largest output: another
// summation order), on sizes with row and K tails; a row's result is bit-identical whatever
// the other rows of the call and the thread count (batched generation equals each alone).
// On bf16 weights it computes oneDNN's bf16 product (x rounded to bf16, exact products,
// fp32 sums): equal to a double-precision sum of the rounded operands within fp32
// summation error (1e-5 of the largest output), both the kernel the build dispatches
// (AVX512-BF16 where targeted) and the portable loop, so no result depends on the ISA.
#include <gtest/gtest.h>

#include <cmath>

#include "loom/kernels/gemv.hpp"
#include "loom/kernels/matmul.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/kernels/threads.hpp"
#include "test_util.hpp"

namespace loom::kernels {
namespace {

TEST(Gemv, MatchesMatmulWithTails) {
  for (const auto& [M, N, K] : std::vector<std::array<int64_t, 3>>{{1, 7, 5}, {3, 37, 100}, {16, 130, 768}, {5, 1, 17}}) {
    const auto x = loom::testing::random_vector(M * K, 1), W = loom::testing::random_vector(N * K, 2),
               b = loom::testing::random_vector(N, 3);
    std::vector<float> got(static_cast<size_t>(M * N)), want(static_cast<size_t>(M * N));
    gemv_rows(x.data(), W.data(), b.data(), got.data(), M, N, K);
    matmul(x.data(), Trans::N, W.data(), Trans::T, want.data(), M, N, K, b.data());
    float scale = 0.0f;
    for (float v : want) scale = std::max(scale, std::fabs(v));
    EXPECT_TRUE(loom::testing::all_close(got.data(), want.data(), M * N, 0, 1e-5 * scale, "gemv")) << M << "x" << N << "x" << K;
  }
}

TEST(Gemv, ARowIsTheSameAloneInABatchAndOnMoreThreads) {
  const int64_t M = 6, N = 401, K = 200;  // N x K past the kernel's threshold for threads
  const auto x = loom::testing::random_vector(M * K, 4), W = loom::testing::random_vector(N * K, 5);
  std::vector<float> batch(static_cast<size_t>(M * N)), alone(static_cast<size_t>(N)), threaded(static_cast<size_t>(M * N));
  const int before = num_threads();
  set_num_threads(1);
  gemv_rows(x.data(), W.data(), nullptr, batch.data(), M, N, K);
  gemv_rows(x.data() + 4 * K, W.data(), nullptr, alone.data(), 1, N, K);
  set_num_threads(2);
  gemv_rows(x.data(), W.data(), nullptr, threaded.data(), M, N, K);
  set_num_threads(before);
  for (int64_t n = 0; n < N; ++n) ASSERT_EQ(alone[n], batch[4 * N + n]) << n;
  EXPECT_EQ(threaded, batch);
}

TEST(Gemv, Bf16WeightsComputeTheRoundedOperandsProduct) {
  for (const auto& [M, N, K] : std::vector<std::array<int64_t, 3>>{{1, 7, 5}, {3, 37, 100}, {4, 130, 768}}) {
    const auto x = loom::testing::random_vector(M * K, 6), W = loom::testing::random_vector(N * K, 7),
               b = loom::testing::random_vector(N, 8);
    std::vector<bfloat16> W16(W.size());
    for (size_t i = 0; i < W.size(); ++i) W16[i] = to_bf16(W[i]);
    std::vector<float> got(static_cast<size_t>(M * N)), onednn(static_cast<size_t>(M * N)), want(static_cast<size_t>(M * N));
    std::vector<float> portable(got.size());
    gemv_rows(x.data(), W16.data(), b.data(), got.data(), M, N, K);
    gemv_rows_portable(x.data(), W16.data(), b.data(), portable.data(), M, N, K);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double sum = b[n];
        for (int64_t k = 0; k < K; ++k)
          sum += static_cast<double>(to_f32(to_bf16(x[m * K + k]))) * to_f32(W16[n * K + k]);
        want[m * N + n] = static_cast<float>(sum);
      }
    {
      const PrecisionScope bf16(Precision::BF16);
      matmul(x.data(), Trans::N, W16.data(), Trans::T, onednn.data(), M, N, K, b.data());
    }
    float scale = 0.0f;
    for (float v : want) scale = std::max(scale, std::fabs(v));
    EXPECT_TRUE(loom::testing::all_close(got.data(), want.data(), M * N, 0, 1e-5 * scale, "gemv bf16")) << M << "x" << N << "x" << K;
    EXPECT_TRUE(loom::testing::all_close(got.data(), onednn.data(), M * N, 0, 1e-5 * scale, "gemv bf16 vs oneDNN"))
        << M << "x" << N << "x" << K;
    EXPECT_TRUE(loom::testing::all_close(portable.data(), want.data(), M * N, 0, 1e-5 * scale, "portable gemv bf16"))
        << M << "x" << N << "x" << K;
  }
}

}  // namespace
}  // namespace loom::kernels
