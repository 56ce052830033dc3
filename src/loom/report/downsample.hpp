// A chart's line drawn through a bounded number of its points: the x range cut into equal
// buckets, each keeping its lowest and highest point in x order, so a one-step spike stays
// visible. Downsampler takes the points one at a time, in x order, knowing beforehand only how
// many there are and the first and last x, and keeps what downsample() keeps of the whole
// vector: a million-step metrics.jsonl is drawn without holding its points.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace loom::report {

using Point = std::pair<double, double>;  // (x, y)

class Downsampler {
 public:
  // n points will be added, x non-decreasing from x0 to x1; at most max_points (>= 4) kept.
  Downsampler(size_t n, double x0, double x1, size_t max_points);
  void add(Point p);
  size_t added() const { return added_; }
  // The points kept, once all n were added.
  std::vector<Point> take();

 private:
  double bucket_end(size_t b) const;
  void close_bucket();

  size_t n_, added_ = 0, buckets_;
  double x0_, x1_;
  bool keep_all_;
  size_t bucket_ = 0;  // the bucket the last point went to
  bool open_ = false;  // it holds a point
  Point lo_{}, hi_{};  // its first lowest and first highest point, added as point lo_at_, hi_at_
  size_t lo_at_ = 0, hi_at_ = 0;
  std::vector<Point> out_;
};

// At most max_points (>= 4) of points (x increasing) tracing the same line: the x range cut
// into (max_points - 2) / 2 equal buckets, each keeping its lowest and highest point in x
// order; the first and last points are kept. points itself when it has no more than
// max_points.
std::vector<Point> downsample(const std::vector<Point>& points, size_t max_points);

}  // namespace loom::report
