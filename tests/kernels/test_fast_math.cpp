// fast_exp against std::exp in double: the accuracy bound softmax, GELU and cross-entropy
// rely on, and the special values NaN detection relies on.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

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

}  // namespace
}  // namespace loom::kernels
