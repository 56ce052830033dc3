// The loop `loom report` drew its lines with before their points were streamed
// (report/downsample.hpp): the slow, obviously correct twin the report's tests hold the
// streaming Downsampler and the two-pass read of metrics.jsonl to, and their comparison.
#pragma once

#include <algorithm>
#include <cstring>
#include <vector>

#include "loom/report/downsample.hpp"

namespace loom::testing {

inline std::vector<report::Point> whole_vector_downsample(const std::vector<report::Point>& points, size_t max_points) {
  if (points.size() <= max_points) return points;
  const size_t buckets = (std::max<size_t>(max_points, 4) - 2) / 2;
  const double x0 = points.front().first, x1 = points.back().first;
  const size_t last = points.size() - 1;
  std::vector<report::Point> out{points.front()};
  size_t i = 1;
  for (size_t b = 0; b < buckets && i < last; ++b) {
    const bool rest = b + 1 == buckets;
    const double end = x0 + (x1 - x0) * static_cast<double>(b + 1) / static_cast<double>(buckets);
    if (!rest && !(points[i].first < end)) continue;
    size_t lo = i, hi = i;
    for (; i < last && (rest || points[i].first < end); ++i) {
      if (points[i].second < points[lo].second) lo = i;
      if (points[i].second > points[hi].second) hi = i;
    }
    out.push_back(points[std::min(lo, hi)]);
    if (lo != hi) out.push_back(points[std::max(lo, hi)]);
  }
  out.push_back(points.back());
  return out;
}

// Equal bit for bit (NaN equals NaN).
inline bool same_points(const std::vector<report::Point>& a, const std::vector<report::Point>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(report::Point)) == 0);
}

}  // namespace loom::testing
