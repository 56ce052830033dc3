#include "loom/plan/gradient_overlap.hpp"

#include <algorithm>

namespace loom::plan {

double exposed_reduction_seconds(const std::vector<ReadyReduction>& in_launch_order, double backward_s) {
  double done = 0;
  for (const ReadyReduction& r : in_launch_order) done = std::max(done, r.ready_s) + r.seconds;
  return std::max(0.0, done - backward_s);
}

std::vector<ReadyReduction> ddp_buckets(const GradientTimeline& t, double bucket_bytes,
                                        const std::function<double(double bytes)>& seconds) {
  std::vector<ReadyReduction> buckets;
  double filled = 0, last_ready = 0;  // the open bucket's bytes and when its last one was ready
  auto close = [&](double ready_s) {
    if (filled > 0) buckets.push_back({ready_s, seconds(filled)});
    filled = 0;
  };
  // A parameter taken whole (the head's final LayerNorm): a bucket closes when it is full.
  filled = t.head_bytes;
  last_ready = t.first_s;
  if (filled >= bucket_bytes) close(last_ready);
  for (int64_t i = 0; i < t.layers; ++i) {
    const double start = t.first_s + static_cast<double>(i) * t.layer_s;
    double taken = 0;  // of this block's bytes, ready evenly over its backward
    while (t.layer_bytes - taken >= bucket_bytes - filled) {
      taken += bucket_bytes - filled;
      filled = bucket_bytes;
      close(start + t.layer_s * taken / t.layer_bytes);
    }
    filled += t.layer_bytes - taken;
    last_ready = start + t.layer_s;
  }
  const double end = t.backward_s();
  if (t.embedding_bytes > 0) {
    // The token table is one parameter, ready at the end: a bucket of its own when the open
    // one cannot take it, else the open one's last.
    if (filled > 0 && filled + t.embedding_bytes > bucket_bytes) close(last_ready);
    filled += t.embedding_bytes;
    last_ready = end;
  }
  close(last_ready);
  return buckets;
}

std::vector<ReadyReduction> zero_units(const GradientTimeline& t, const std::function<double(double bytes)>& seconds) {
  std::vector<ReadyReduction> units;
  for (int64_t i = 1; i <= t.layers; ++i)
    units.push_back({t.first_s + static_cast<double>(i) * t.layer_s, seconds(t.layer_bytes)});
  if (t.head_bytes + t.embedding_bytes > 0) units.push_back({t.backward_s(), seconds(t.head_bytes + t.embedding_bytes)});
  return units;
}

}  // namespace loom::plan
