// The few-rows GEMV against oneDNN's matmul (relative 1e-5 of the largest output: another
// summation order), on sizes with row and K tails; a row's result is bit-identical whatever
// the other rows of the call and the thread count (batched generation equals each alone).
#include <gtest/gtest.h>

#include <cmath>

#include "loom/kernels/gemv.hpp"
#include "loom/kernels/matmul.hpp"
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

}  // namespace
}  // namespace loom::kernels
