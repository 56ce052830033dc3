#include "loom/plan/comm_cost.hpp"

#include <algorithm>
#include <cmath>

namespace loom::plan {

namespace {
int ceil_log2(int p) {
  int k = 0;
  while ((1 << k) < p) ++k;
  return k;
}
}  // namespace

double all_reduce_seconds(const std::string& algorithm, int64_t bytes, int p, const LinkCost& link, int servers) {
  if (p <= 1) return 0.0;
  const double n = static_cast<double>(bytes), a = link.alpha_s, b = link.beta_s_per_byte;
  if (algorithm == "ring") return 2.0 * (p - 1) * a + 2.0 * (p - 1) / p * n * b;
  if (algorithm == "tree") return 2.0 * ceil_log2(p) * (a + n * b);
  if (algorithm == "rhd") {
    int pof2 = 1;
    while (pof2 * 2 <= p) pof2 *= 2;
    const double core = 2.0 * ceil_log2(pof2) * a + 2.0 * (pof2 - 1) / pof2 * n * b;
    return pof2 == p ? core : core + 2.0 * (a + n * b);  // fold and unfold
  }
  if (algorithm == "param-server") {
    const int k = std::clamp(servers, 1, p);
    // The busiest server receives p - 1 pushes and sends p - 1 pulls of its n / k shard.
    return 2.0 * (p - 1) * (a + n / k * b);
  }
  return -1.0;
}

double all_reduce_bus_bandwidth(int64_t bytes, double seconds, int p) {
  if (seconds <= 0.0 || p <= 1) return 0.0;
  return static_cast<double>(bytes) / seconds * 2.0 * (p - 1) / p;
}

int64_t tensor_parallel_bytes_per_step(int64_t B, int64_t T, int64_t C, int64_t L, int64_t block_size, int64_t M,
                                       bool sequence_parallel, int zero_stage, int64_t activation_bytes) {
  const int64_t activation = B * T * C, loss = 3 * B * T;
  const int64_t activations = (sequence_parallel ? 10 * L + 5 : 4 * L + 2) * activation;
  const int64_t sums = zero_stage >= 2 ? M : 1;
  const int64_t replicated = sequence_parallel ? sums * (6 * C * L + block_size * C + 2 * C) : 0;
  return activation_bytes * M * activations + 4 * (M * loss + replicated + 1);
}

int64_t pipeline_bytes_per_step(int64_t values, int64_t M, int64_t virtual_stages, int64_t activation_bytes) {
  return 2 * M * (virtual_stages - 1) * values * activation_bytes;
}

}  // namespace loom::plan
