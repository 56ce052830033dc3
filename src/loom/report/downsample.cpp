#include "loom/report/downsample.hpp"

#include <algorithm>

namespace loom::report {

Downsampler::Downsampler(size_t n, double x0, double x1, size_t max_points)
    : n_(n), buckets_((std::max<size_t>(max_points, 4) - 2) / 2), x0_(x0), x1_(x1), keep_all_(n <= max_points) {}

double Downsampler::bucket_end(size_t b) const {
  return x0_ + (x1_ - x0_) * static_cast<double>(b + 1) / static_cast<double>(buckets_);
}

void Downsampler::close_bucket() {
  if (!open_) return;
  out_.push_back(lo_at_ < hi_at_ ? lo_ : hi_);  // in x order
  if (lo_at_ != hi_at_) out_.push_back(lo_at_ < hi_at_ ? hi_ : lo_);
  open_ = false;
}

void Downsampler::add(Point p) {
  const size_t at = added_++;
  if (keep_all_ || at == 0) {
    out_.push_back(p);
    return;
  }
  if (at + 1 == n_) {
    close_bucket();
    out_.push_back(p);
    return;
  }
  // A point belongs to the first bucket whose end lies past its x; the last bucket takes the
  // rest, so rounding never leaves a point out. Ties keep the earlier point.
  if (open_ && (bucket_ + 1 == buckets_ || p.first < bucket_end(bucket_))) {
    if (p.second < lo_.second) lo_ = p, lo_at_ = at;
    if (p.second > hi_.second) hi_ = p, hi_at_ = at;
    return;
  }
  if (open_) {
    close_bucket();
    ++bucket_;
  }
  while (bucket_ + 1 < buckets_ && !(p.first < bucket_end(bucket_))) ++bucket_;
  open_ = true;
  lo_ = hi_ = p;
  lo_at_ = hi_at_ = at;
}

std::vector<Point> Downsampler::take() {
  close_bucket();
  return std::move(out_);
}

std::vector<Point> downsample(const std::vector<Point>& points, size_t max_points) {
  if (points.size() <= max_points) return points;
  Downsampler d(points.size(), points.front().first, points.back().first, max_points);
  for (const Point& p : points) d.add(p);
  return d.take();
}

}  // namespace loom::report
