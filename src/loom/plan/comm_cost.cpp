#include "loom/plan/comm_cost.hpp"

#include <algorithm>
#include <cmath>

#include "loom/plan/moe_cost.hpp"

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
                                       bool sequence_parallel, int zero_stage, int64_t activation_bytes,
                                       const TensorParallelMoe& moe) {
  const int64_t activation = B * T * C, loss = 3 * B * T, Lm = moe.layers, E = moe.experts;
  // A dense MLP moves 5 activations under sequence parallelism, 2 without; an MoE block's none.
  const int64_t activations = (sequence_parallel ? 10 * L - 5 * Lm + 5 : 4 * L - 2 * Lm + 2) * activation;
  const int64_t sums = zero_stage >= 2 ? M : 1;
  int64_t replicated = 0, moe_statistics = 0;
  if (sequence_parallel) {
    const int64_t dense = 6 * C * L + block_size * C + 2 * C - Lm * C;  // an MoE block has no MLP projection bias
    replicated = sums * dense + moe_tensor_parallel_gradient_values(Lm, C, E, moe.local_experts, sums, moe.expert_parallel);
    if (Lm > 0) moe_statistics = M * Lm * 3 * B * E + E + 4;
    if (Lm > 0 && moe.capacity) moe_statistics += M * Lm * T * (1 + B * moe.top_k);
  }
  return activation_bytes * M * activations + 4 * (M * loss + replicated + moe_statistics + 1);
}

int64_t pipeline_bytes_per_step(int64_t values, int64_t M, int64_t virtual_stages, int64_t activation_bytes) {
  return 2 * M * (virtual_stages - 1) * values * activation_bytes;
}

}  // namespace loom::plan
