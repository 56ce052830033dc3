#include "loom/plan/mixed_precision_cost.hpp"

namespace loom::plan {

StateBytes mixed_precision_state_bytes(int64_t params, int64_t fp32_read_params, int shards, int zero_stage,
                                       int64_t optimizer_bytes_per_param) {
  const int64_t n = shards > 0 ? shards : 1;
  StateBytes s;
  if (zero_stage == 0) {
    s.params = 4 * params + 2 * params;
  } else if (zero_stage < 3) {
    s.params = 2 * params + 4 * fp32_read_params + 4 * params / n;
  } else {
    s.params = (4 + 2) * params / n;
  }
  s.grads = zero_stage >= 2 ? 4 * params / n : 4 * params;
  s.optimizer = zero_stage >= 1 ? optimizer_bytes_per_param * params / n : optimizer_bytes_per_param * params;
  return s;
}

int64_t bf16_state_bytes(int64_t params_here, int64_t gemm_only_params, int64_t dp, int zero_stage) {
  return mixed_precision_state_bytes(params_here, params_here - gemm_only_params, static_cast<int>(dp), zero_stage, 8)
      .total();
}

int64_t bf16_saved_activation_bytes(int64_t B, int64_t T, int64_t C, int64_t t, bool sequence_parallel) {
  const int64_t Tr = sequence_parallel ? T / t : T;
  return 2 * (2 * B * Tr * C + 5 * B * T * C / t);
}

}  // namespace loom::plan
