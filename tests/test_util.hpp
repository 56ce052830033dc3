// Helpers shared by tests: deterministic random fills, tensor comparison that prints
// the first mismatches and the largest error, central finite differences, and the
// "2 threads twice, then 1" determinism check.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "loom/error.hpp"
#include "loom/kernels/threads.hpp"

namespace loom::testing {

// A file's bytes.
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// An empty directory under the system's temporary directory (removed first if present).
inline std::filesystem::path fresh_temp_dir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

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

// d loss / d x by central differences, restoring x. x is moved to x +- float(h) in fp32, and
// the difference is divided by the float-rounded step actually taken, in double.
// Largest |got - want| over the largest |want| (a whole vector's error relative to its scale).
inline double relative_error(const float* got, const float* want, int64_t n) {
  double diff = 0.0, scale = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  return diff / scale;
}

inline double central_difference(float& x, double h, const std::function<double()>& loss) {
  const float step = static_cast<float>(h);
  const float p0 = x, hi = p0 + step, lo = p0 - step;
  x = hi;
  const double lp = loss();
  x = lo;
  const double lm = loss();
  x = p0;
  return (lp - lm) / (static_cast<double>(hi) - lo);
}

// central_difference for every element of xs, in order, as fp32.
inline std::vector<float> central_differences(std::vector<float>& xs, double h,
                                              const std::function<double()>& loss) {
  std::vector<float> grad(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) grad[i] = static_cast<float>(central_difference(xs[i], h, loss));
  return grad;
}

// Calls run() with 2 threads, again with 2 and then with 1, going back to 1 thread after each.
// The two 2-thread results must be bit-identical; the 1-thread one within rtol / atol of them.
inline void expect_deterministic_across_threads(const std::function<std::vector<float>()>& run, double rtol,
                                                double atol, const std::string& vs_one = "2 threads vs 1") {
  auto with = [&](int threads) {
    kernels::set_num_threads(threads);
    std::vector<float> r = run();
    kernels::set_num_threads(1);
    return r;
  };
  const auto a = with(2), b = with(2), one = with(1);
  EXPECT_TRUE(all_close(a, b, 0.0, 0.0, "2 threads, run twice"));
  EXPECT_TRUE(all_close(a, one, rtol, atol, vs_one));
}

// The loom::Error message f throws, or "(no error)": tests assert each documented message.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace loom::testing
