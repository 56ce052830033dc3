// Timing helpers of the commands that measure (`loom bench`, `loom bench comm`, `loom plan`):
// seconds on the steady clock, and the median of repeated measurements, which on a machine
// shared with other jobs is the share a run will get.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace loom::apps {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The upper median for an even count; 0 for no measurements.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace loom::apps
