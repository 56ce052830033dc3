// Helpers shared by tests: deterministic random fills and tensor comparison that prints
// the first mismatches and the largest error.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace loom::testing {

inline std::vector<float> random_vector(int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

// Passes when |a - b| <= atol + rtol * |b| everywhere; otherwise names the first mismatches.
inline ::testing::AssertionResult all_close(const float* a, const float* b, int64_t n, double rtol,
                                            double atol, const std::string& what = "") {
  int64_t bad = 0;
  double max_abs = 0.0, max_rel = 0.0;
  std::ostringstream first;
  for (int64_t i = 0; i < n; ++i) {
    const double diff = std::fabs(static_cast<double>(a[i]) - b[i]);
    const double rel = diff / std::max(1e-30, std::fabs(static_cast<double>(b[i])));
    max_abs = std::max(max_abs, diff);
    if (diff > atol) max_rel = std::max(max_rel, rel);
    if (!(diff <= atol + rtol * std::fabs(static_cast<double>(b[i])))) {
      if (bad < 5) first << "\n  [" << i << "] got " << a[i] << " want " << b[i];
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << n << " elements differ (rtol "
                                       << rtol << ", atol " << atol << "), max abs err " << max_abs
                                       << ", max rel err " << max_rel << first.str();
}

inline ::testing::AssertionResult all_close(const std::vector<float>& a, const std::vector<float>& b,
                                            double rtol, double atol, const std::string& what = "") {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << what << ": sizes " << a.size() << " vs " << b.size();
  return all_close(a.data(), b.data(), static_cast<int64_t>(a.size()), rtol, atol, what);
}

}  // namespace loom::testing
