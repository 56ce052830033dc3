#include "loom/plan/gradient_overlap.hpp"

#include <algorithm>
#include <numeric>

#include "loom/error.hpp"

namespace loom::plan {

double exposed_reduction_seconds(const std::vector<ReadyReduction>& in_launch_order, double backward_s) {
  double done = 0;
  for (const ReadyReduction& r : in_launch_order) done = std::max(done, r.ready_s) + r.seconds;
  return std::max(0.0, done - backward_s);
}

double total_seconds(const std::vector<ReadyReduction>& reductions) {
  double sum = 0;
  for (const ReadyReduction& r : reductions) sum += r.seconds;
  return sum;
}

namespace {

// Each parameter's bytes and the time its gradient is ready, in backward's order.
struct ReadyParameter {
  double bytes, ready_s;
};

std::vector<ReadyParameter> ready_parameters(const GradientTimeline& t) {
  std::vector<ReadyParameter> out;
  for (double b : t.head) out.push_back({b, t.first_s});
  const double layer_bytes = std::accumulate(t.layer.begin(), t.layer.end(), 0.0);
  for (int64_t i = 0; i < t.layers; ++i) {
    const double start = t.first_s + static_cast<double>(i) * t.layer_s;
    double through = 0;
    for (double b : t.layer) {
      through += b;
      out.push_back({b, start + (layer_bytes > 0 ? t.layer_s * through / layer_bytes : t.layer_s)});
    }
  }
  for (double b : t.embedding) out.push_back({b, t.backward_s()});
  return out;
}

}  // namespace

std::vector<double> block_gradients(int64_t hidden, int64_t t, double block_bytes) {
  const double h = static_cast<double>(hidden), s = static_cast<double>(t);
  std::vector<double> p{h, 4 * h * h / s, 4 * h / s, 4 * h * h / s, h, h, h, h * h / s, 3 * h / s, 3 * h * h / s, h, h};
  const double dense = std::accumulate(p.begin(), p.end(), 0.0);
  for (double& bytes : p) bytes *= block_bytes / dense;
  return p;
}

std::vector<ReadyReduction> ddp_buckets(const GradientTimeline& t, double bucket_bytes,
                                        const std::function<double(double bytes)>& seconds) {
  check(bucket_bytes > 0, "DDP bucket size must be > 0 bytes, got ", bucket_bytes);
  std::vector<ReadyReduction> buckets;
  double filled = 0, ready_s = 0;  // the open bucket
  for (const ReadyParameter& p : ready_parameters(t)) {
    if (filled > 0 && filled + p.bytes > bucket_bytes) {
      buckets.push_back({ready_s, seconds(filled)});
      filled = 0;
    }
    filled += p.bytes;
    ready_s = p.ready_s;
  }
  if (filled > 0) buckets.push_back({ready_s, seconds(filled)});
  return buckets;
}

std::vector<ReadyReduction> zero_units(const GradientTimeline& t, const std::function<double(double bytes)>& seconds) {
  std::vector<ReadyReduction> units;
  const double block = std::accumulate(t.layer.begin(), t.layer.end(), 0.0);
  for (int64_t i = 1; i <= t.layers; ++i) units.push_back({t.first_s + static_cast<double>(i) * t.layer_s, seconds(block)});
  const double root = std::accumulate(t.head.begin(), t.head.end(), 0.0) +
                      std::accumulate(t.embedding.begin(), t.embedding.end(), 0.0);
  if (root > 0) units.push_back({t.backward_s(), seconds(root)});
  return units;
}

}  // namespace loom::plan
