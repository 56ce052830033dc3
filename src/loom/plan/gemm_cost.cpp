#include "loom/plan/gemm_cost.hpp"

#include <algorithm>

namespace loom::plan {

double wave_efficiency(const Gemm& g, const ClusterSpec& c) {
  if (c.compute_units <= 0) return 1.0;
  const int64_t tiles = g.batch * ceil_div(g.m, c.tile_m) * ceil_div(g.n, c.tile_n);
  // Partly filled edge tiles cost a full tile as well (tile quantization).
  const double useful = static_cast<double>(g.m * g.n * g.batch) / static_cast<double>(tiles * c.tile_m * c.tile_n);
  const int64_t waves = ceil_div(tiles, c.compute_units);
  return useful * static_cast<double>(tiles) / static_cast<double>(waves * c.compute_units);
}

const MeasuredRate* find_rate(const std::vector<MeasuredRate>& rates, const Gemm& g) {
  for (const MeasuredRate& r : rates)
    if (r.shape == g) return &r;
  return nullptr;
}

double gemm_seconds(const Gemm& g, const ClusterSpec& c, int64_t bytes_per_value) {
  if (g.m <= 0 || g.n <= 0 || g.k <= 0) return 0.0;
  if (const MeasuredRate* r = find_rate(c.gemm_rates, g)) return g.flops() / r->forward;
  const double compute = g.flops() / (c.peak_flops * c.gemm_peak_share * wave_efficiency(g, c));
  const double bytes = static_cast<double>(bytes_per_value * g.batch * (g.m * g.k + g.k * g.n + g.m * g.n));
  return std::max(compute, bytes / c.memory_bandwidth);
}

double gemm_backward_seconds(const Gemm& g, const ClusterSpec& c, int64_t bytes_per_value) {
  if (g.m <= 0 || g.n <= 0 || g.k <= 0) return 0.0;
  if (const MeasuredRate* r = find_rate(c.gemm_rates, g)) return 2.0 * g.flops() / r->backward;
  return gemm_seconds(Gemm{g.m, g.k, g.n, g.batch}, c, bytes_per_value) +
         gemm_seconds(Gemm{g.k, g.n, g.m, g.batch}, c, bytes_per_value);
}

}  // namespace loom::plan
