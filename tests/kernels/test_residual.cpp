// Residual add and its helpers against plain loops, aliasing, bias_backward's accumulation
// and finite differences, thread-count behaviour of the two reductions, and the bias pass that
// also writes its input in bf16.
#include <gtest/gtest.h>

#include <bit>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "loom/kernels/precision.hpp"
#include "loom/kernels/residual.hpp"
#include "loom/kernels/threads.hpp"
#include "test_util.hpp"

namespace loom::kernels {
namespace {

using loom::testing::all_close;
using loom::testing::central_differences;
using loom::testing::expect_deterministic_across_threads;
using loom::testing::random_vector;

TEST(Residual, ElementwiseOpsMatchLoopsIncludingAliasing) {
  // Exact: one fp32 operation per element. Sizes cover the serial and parallel paths.
  for (int64_t n : {int64_t{13}, int64_t{100003}}) {
    set_num_threads(2);
    const auto a = random_vector(n, 1), b = random_vector(n, 2);
    std::vector<float> sum(n), want(n), scaled(n);
    for (int64_t i = 0; i < n; ++i) {
      want[i] = a[i] + b[i];
      scaled[i] = a[i] * 0.37f;
    }
    residual_forward(sum.data(), a.data(), b.data(), n);
    EXPECT_TRUE(all_close(sum, want, 0.0, 0.0, "residual_forward"));
    auto alias = a;
    residual_forward(alias.data(), alias.data(), b.data(), n);
    EXPECT_TRUE(all_close(alias, want, 0.0, 0.0, "residual_forward out == a"));
    alias = b;
    residual_forward(alias.data(), a.data(), alias.data(), n);
    EXPECT_TRUE(all_close(alias, want, 0.0, 0.0, "residual_forward out == b"));
    auto acc = a;
    add_inplace(acc.data(), b.data(), n);
    EXPECT_TRUE(all_close(acc, want, 0.0, 0.0, "add_inplace"));
    auto sc = a;
    scale_inplace(sc.data(), 0.37f, n);
    EXPECT_TRUE(all_close(sc, scaled, 0.0, 0.0, "scale_inplace"));
    set_num_threads(1);
  }
}

TEST(Residual, SumSquaresMatchesDoubleAndIsDeterministic) {
  // Tolerance: rtol 1e-12 (accumulated in double either way).
  const int64_t n = 1'000'003;
  const auto x = random_vector(n, 3, -3.0f, 3.0f);
  double want = 0.0;
  for (float v : x) want += static_cast<double>(v) * v;
  EXPECT_NEAR(sum_squares(x.data(), n), want, 1e-12 * want);
  set_num_threads(2);
  const double a = sum_squares(x.data(), n), b = sum_squares(x.data(), n);
  set_num_threads(1);
  EXPECT_EQ(a, b);
  EXPECT_NEAR(a, want, 1e-12 * want);
  EXPECT_EQ(sum_squares(x.data(), 0), 0.0);
}

TEST(BiasBackward, MatchesTwinAndAccumulates) {
  // Tolerance: rtol 1e-5 against double column sums.
  const int64_t N = 37, OC = 29;
  const auto dout = random_vector(N * OC, 4);
  const auto init = random_vector(OC, 5);
  std::vector<float> want(OC), want2(OC);
  for (int64_t c = 0; c < OC; ++c) {
    double s = 0.0;
    for (int64_t r = 0; r < N; ++r) s += dout[r * OC + c];
    want[c] = static_cast<float>(init[c] + s);
    want2[c] = static_cast<float>(init[c] + 2.0 * s);
  }
  auto dbias = init;
  bias_backward(dbias.data(), dout.data(), N, OC);
  EXPECT_TRUE(all_close(dbias, want, 1e-5, 1e-6, "once"));
  bias_backward(dbias.data(), dout.data(), N, OC);
  EXPECT_TRUE(all_close(dbias, want2, 1e-5, 1e-6, "twice"));
}

TEST(BiasBackward, FiniteDifferenceGradient) {
  // loss = sum((x + bias) * g) over rows; d loss / d bias is the column sum of g.
  // Tolerance: atol 1e-3 (linear, central differences with h = 0.1).
  const int64_t N = 6, OC = 5;
  const auto x = random_vector(N * OC, 6), g = random_vector(N * OC, 7);
  auto bias = random_vector(OC, 8);
  std::vector<float> y(N * OC);
  auto loss = [&] {
    for (int64_t r = 0; r < N; ++r) residual_forward(y.data() + r * OC, x.data() + r * OC, bias.data(), OC);
    double l = 0.0;
    for (int64_t i = 0; i < N * OC; ++i) l += static_cast<double>(y[i]) * g[i];
    return l;
  };
  const auto numeric = central_differences(bias, 0.1, loss);
  std::vector<float> dbias(OC, 0.0f);
  bias_backward(dbias.data(), g.data(), N, OC);
  EXPECT_TRUE(all_close(dbias, numeric, 1e-4, 1e-3, "dbias"));
}

TEST(BiasBackward, IndependentOfThreadCount) {
  // Split over columns, each summed in row order: 1 and 2 threads agree bit for bit.
  const int64_t N = 1000, OC = 130;
  const auto dout = random_vector(N * OC, 9);
  expect_deterministic_across_threads(
      [&] {
        std::vector<float> dbias(OC, 0.25f);
        bias_backward(dbias.data(), dout.data(), N, OC);
        return dbias;
      },
      0.0, 0.0);
}

TEST(BiasBackward, WritingBf16IsTheUnfusedPassesBitForBit) {
  // The fused pass (mixed precision's Linear backward) against bias_backward then
  // convert_to_bf16: the same dbias and the same bf16 values exactly, at 1 and 2 threads, for
  // widths that split into uneven column slices and for the serial (small) path. Special
  // values (NaN, infinities, a subnormal, a value on a rounding tie) take the same rounding.
  for (const auto& [N, OC] : std::vector<std::pair<int64_t, int64_t>>{{3, 5}, {300, 130}, {257, 1000}}) {
    auto dout = random_vector(N * OC, 11);
    const std::vector<float> special = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                                        -std::numeric_limits<float>::infinity(), 1e-40f, 1.00390625f};
    for (size_t i = 0; i < special.size() && i < dout.size(); ++i) dout[i * 3] = special[i];
    std::vector<float> want_bias(OC, 0.5f);
    std::vector<bfloat16> want_bf16(N * OC);
    bias_backward(want_bias.data(), dout.data(), N, OC);
    convert_to_bf16(dout.data(), want_bf16.data(), N * OC);
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      std::vector<float> dbias(OC, 0.5f);
      std::vector<bfloat16> got(N * OC, bfloat16{0x1234});
      bias_backward(dbias.data(), dout.data(), N, OC, got.data());
      set_num_threads(1);
      const std::string at = std::to_string(N) + "x" + std::to_string(OC) + " at " + std::to_string(threads);
      for (int64_t c = 0; c < OC; ++c)
        ASSERT_EQ(std::bit_cast<uint32_t>(dbias[c]), std::bit_cast<uint32_t>(want_bias[c])) << at << " column " << c;
      for (int64_t i = 0; i < N * OC; ++i) ASSERT_EQ(got[i].bits, want_bf16[i].bits) << at << " element " << i;
    }
  }
}

}  // namespace
}  // namespace loom::kernels
