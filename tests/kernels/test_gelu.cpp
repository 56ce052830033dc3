// GELU (tanh approximation) against std::tanh in double, finite differences, in-place use
// and extreme inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "loom/kernels/gelu.hpp"
#include "loom/kernels/threads.hpp"
#include "test_util.hpp"

namespace loom::kernels {
namespace {

using loom::testing::all_close;
using loom::testing::central_differences;
using loom::testing::random_vector;

constexpr double kS = 0.79788456080286535588;  // sqrt(2 / pi)

double gelu_ref(double x) { return 0.5 * x * (1.0 + std::tanh(kS * (x + 0.044715 * x * x * x))); }
double gelu_grad_ref(double x) {
  const double th = std::tanh(kS * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * kS * (1.0 + 3.0 * 0.044715 * x * x);
}

TEST(Gelu, MatchesTanhFormula) {
  // Tolerance: rtol 1e-5, atol 1e-7 against double (fast_exp is ~1e-7 relative).
  auto x = random_vector(1001, 1, -8.0f, 8.0f);
  x.insert(x.end(), {0.0f, -0.0f, 1e-20f, -1e-20f, 30.0f, -30.0f, 1e4f, -1e4f});
  const auto dout = random_vector(static_cast<int64_t>(x.size()), 2);
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> out(n), dinp(n), want(n), want_d(n);
  for (int64_t i = 0; i < n; ++i) {
    want[i] = static_cast<float>(gelu_ref(x[i]));
    want_d[i] = static_cast<float>(gelu_grad_ref(x[i]) * dout[i]);
  }
  gelu_forward(out.data(), x.data(), n);
  gelu_backward(dinp.data(), x.data(), dout.data(), n);
  EXPECT_TRUE(all_close(out, want, 1e-5, 1e-7, "out"));
  EXPECT_TRUE(all_close(dinp, want_d, 1e-5, 1e-7, "dinp"));
}

TEST(Gelu, FiniteDifferenceGradient) {
  // d/dx of sum(gelu(x) * g), h = 1e-2. Tolerance: atol 1e-4, rtol 1e-3.
  const int64_t n = 37;
  auto x = random_vector(n, 3, -4.0f, 4.0f);
  const auto g = random_vector(n, 4);
  std::vector<float> out(n), dinp(n);
  auto loss = [&] {
    gelu_forward(out.data(), x.data(), n);
    double l = 0.0;
    for (int64_t i = 0; i < n; ++i) l += static_cast<double>(out[i]) * g[i];
    return l;
  };
  const auto numeric = central_differences(x, 1e-2, loss);
  gelu_backward(dinp.data(), x.data(), g.data(), n);
  EXPECT_TRUE(all_close(dinp, numeric, 1e-3, 1e-4, "dinp"));
}

TEST(Gelu, InPlaceMatchesOutOfPlace) {
  // Large enough for the parallel path, with 2 threads; aliasing allowed by the header.
  set_num_threads(2);
  const int64_t n = 100003;
  const auto x = random_vector(n, 5, -5.0f, 5.0f), dout = random_vector(n, 6);
  std::vector<float> out(n), inplace = x, dinp(n), dinplace = dout;
  gelu_forward(out.data(), x.data(), n);
  gelu_forward(inplace.data(), inplace.data(), n);
  gelu_backward(dinp.data(), x.data(), dout.data(), n);
  gelu_backward(dinplace.data(), x.data(), dinplace.data(), n);
  set_num_threads(1);
  EXPECT_TRUE(all_close(inplace, out, 0.0, 0.0, "forward in place"));
  EXPECT_TRUE(all_close(dinplace, dinp, 0.0, 0.0, "backward in place"));
  std::vector<float> serial(n);
  gelu_forward(serial.data(), x.data(), n);
  EXPECT_TRUE(all_close(serial, out, 0.0, 0.0, "1 vs 2 threads"));
}

// Mixed precision keeps GELU's input in bf16: the forward that writes that copy in its pass
// gives the fp32 output unchanged (or, the variant that writes it in bf16, to_bf16 of it) and
// to_bf16 of every input (ties to even, NaN a NaN), and
// the backward from the copy equals the fp32 backward on the widened copy, bit for bit, on
// a ragged length (masked last vector) with 2 threads.
TEST(Gelu, KeepsItsInputInBf16) {
  set_num_threads(2);
  const int64_t n = 100003;
  auto x = random_vector(n, 7, -6.0f, 6.0f);
  x[5] = NAN;
  x[6] = 1.00390625f;  // exactly between two bf16 values: rounds to even (1.0)
  const auto dout = random_vector(n, 8);
  std::vector<float> out(n), want(n), dinp(n), widened(n), dwant(n);
  std::vector<bfloat16> kept(n), kept2(n), out_bf16(n);
  gelu_forward(out.data(), kept.data(), x.data(), n);
  gelu_forward(out_bf16.data(), kept2.data(), x.data(), n);
  gelu_forward(want.data(), x.data(), n);
  gelu_backward(dinp.data(), kept.data(), dout.data(), n);
  for (int64_t i = 0; i < n; ++i) widened[i] = to_f32(kept[i]);
  gelu_backward(dwant.data(), widened.data(), dout.data(), n);
  set_num_threads(1);
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(widened[i]) && std::isnan(out[i]) && std::isnan(dinp[i]));
      continue;
    }
    ASSERT_EQ(kept[i].bits, to_bf16(x[i]).bits) << i;
    ASSERT_EQ(kept2[i].bits, kept[i].bits) << i;
    ASSERT_EQ(out[i], want[i]) << i;
    ASSERT_EQ(out_bf16[i].bits, to_bf16(want[i]).bits) << i;
    ASSERT_EQ(dinp[i], dwant[i]) << i;
  }
  EXPECT_EQ(widened[6], 1.0f);
}

TEST(Gelu, NaNPropagates) {
  const float x[2] = {NAN, 1.0f}, d[2] = {1.0f, NAN};
  float out[2], dinp[2];
  gelu_forward(out, x, 2);
  gelu_backward(dinp, x, d, 2);
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_TRUE(std::isnan(dinp[0]));
  EXPECT_TRUE(std::isnan(dinp[1]));
}

}  // namespace
}  // namespace loom::kernels
