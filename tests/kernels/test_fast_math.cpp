// fast_exp against std::exp in double: the accuracy bound softmax, GELU and cross-entropy
// rely on, and the special values NaN detection relies on.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "loom/kernels/fast_math.hpp"

namespace loom::kernels {
namespace {

TEST(FastExp, RelativeErrorBelow2e7OverFullRange) {
  // Tolerance: 2e-7 relative (about 1.7 ulp) on every sampled x in [-87.3, 88.7].
  double worst = 0.0;
  float worst_x = 0.0f;
  const int64_t n = 2'000'000;
  for (int64_t i = 0; i <= n; ++i) {
    const float x = static_cast<float>(-87.3 + (88.7 + 87.3) * static_cast<double>(i) / n);
    const double want = std::exp(static_cast<double>(x));
    const double rel = std::fabs(fast_exp(x) - want) / want;
    if (rel > worst) {
      worst = rel;
      worst_x = x;
    }
  }
  EXPECT_LE(worst, 2e-7) << "at x = " << worst_x;
}

TEST(FastExp, ExactAtZeroAndSmallArguments) {
  EXPECT_EQ(fast_exp(0.0f), 1.0f);
  EXPECT_EQ(fast_exp(-0.0f), 1.0f);
  EXPECT_EQ(fast_exp(1e-30f), 1.0f);
}

TEST(FastExp, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(fast_exp(-inf), 0.0f);
  EXPECT_EQ(fast_exp(-1000.0f), 0.0f);
  EXPECT_EQ(fast_exp(-88.0f), 0.0f);  // subnormal range is flushed to 0
  EXPECT_EQ(fast_exp(inf), inf);
  EXPECT_EQ(fast_exp(89.0f), inf);
  EXPECT_TRUE(std::isfinite(fast_exp(88.72f)));
  EXPECT_TRUE(std::isnan(fast_exp(std::numeric_limits<float>::quiet_NaN())));
}

TEST(FastExp, VectorisedLoopMatchesScalarCalls) {
  // The kernels call it inside `omp simd` loops; the vector code must give the same values.
  std::vector<float> x(1003), y(1003);
  for (size_t i = 0; i < x.size(); ++i) x[i] = -80.0f + 0.16f * static_cast<float>(i);
  float* __restrict yp = y.data();
  const float* __restrict xp = x.data();
#pragma omp simd
  for (size_t i = 0; i < x.size(); ++i) yp[i] = fast_exp(xp[i]);
  for (size_t i = 0; i < x.size(); ++i) {
    const volatile float xi = x[i];  // volatile: force the scalar path
    EXPECT_EQ(y[i], fast_exp(xi)) << "x = " << x[i];
  }
}

#if LOOM_FAST_MATH_AVX512
TEST(FastExp, Avx512MatchesScalarBitForBit) {
  // fast_exp16 (the intrinsics kernels' version) must give fast_exp's value for every input.
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x{0.0f, -0.0f, 1e-30f, -1e-30f, inf, -inf, std::numeric_limits<float>::quiet_NaN(),
                       -87.33654f, -87.3365f, -87.34f, 88.72283f, 88.7228f, 88.73f, -1000.0f, 1000.0f};
  for (int64_t i = 0; i <= 400'000; ++i) x.push_back(static_cast<float>(-90.0 + 180.0 * static_cast<double>(i) / 400'000));
  while (x.size() % 16 != 0) x.push_back(1.0f);
  for (size_t i = 0; i < x.size(); i += 16) {
    alignas(64) float y[16];
    _mm512_store_ps(y, fast_exp16(_mm512_loadu_ps(x.data() + i)));
    for (size_t j = 0; j < 16; ++j) {
      const volatile float xi = x[i + j];
      const float want = fast_exp(xi);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(y[j])) << "x = " << x[i + j];
      } else {
        EXPECT_EQ(y[j], want) << "x = " << x[i + j];
      }
    }
  }
}
#endif

}  // namespace
}  // namespace loom::kernels
