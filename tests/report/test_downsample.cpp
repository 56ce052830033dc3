// The streaming Downsampler against the whole-vector loop it replaced (the slow, obviously
// correct twin in whole_vector_downsample.hpp): the same points kept, bit for bit, for every
// size around the bound, runs of equal x, tied, infinite and NaN values, and uneven steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "loom/report/downsample.hpp"
#include "report/whole_vector_downsample.hpp"

namespace {

using loom::report::Point;
using loom::testing::same_points;
using loom::testing::whole_vector_downsample;

TEST(ReportDownsample, StreamingKeepsWhatTheWholeVectorKept) {
  std::mt19937_64 rng(2026);
  const double kInf = std::numeric_limits<double>::infinity(), kNaN = std::numeric_limits<double>::quiet_NaN();
  for (int trial = 0; trial < 4000; ++trial) {
    const size_t max_points = std::vector<size_t>{1, 4, 5, 6, 7, 10, 64}[static_cast<size_t>(trial) % 7];
    const size_t n = max_points > 10 ? rng() % 400 : rng() % 40;
    std::vector<Point> points;
    double x = static_cast<double>(rng() % 100) - 50;
    for (size_t i = 0; i < n; ++i) {
      // Steps: runs of equal x, unit steps and jumps; values: few distinct (ties), some extreme.
      const uint64_t kind = rng() % 10;
      x += kind < 3 ? 0.0 : kind < 8 ? 1.0 : static_cast<double>(rng() % 1000);
      double y = static_cast<double>(rng() % 5);
      const uint64_t odd = rng() % 50;
      if (odd == 0) y = kNaN;
      else if (odd == 1) y = kInf;
      else if (odd == 2) y = -kInf;
      else if (odd == 3) y = -0.0;
      points.emplace_back(x, y);
    }
    ASSERT_TRUE(same_points(loom::report::downsample(points, max_points), whole_vector_downsample(points, max_points)))
        << "trial " << trial << ": " << n << " points, at most " << max_points;
  }
}

TEST(ReportDownsample, AMillionPointsOneAtATime) {
  std::vector<Point> points;
  for (int i = 0; i < 1000000; ++i) points.emplace_back(i / 3, std::sin(i * 0.001) + (i == 777777 ? 50 : 0));
  loom::report::Downsampler d(points.size(), points.front().first, points.back().first, 2000);
  for (const Point& p : points) d.add(p);
  const std::vector<Point> kept = d.take();
  EXPECT_LE(kept.size(), 2000u);
  EXPECT_TRUE(same_points(kept, whole_vector_downsample(points, 2000)));
  EXPECT_NE(std::find(kept.begin(), kept.end(), points[777777]), kept.end());  // the spike
}

}  // namespace
