#include "loom/plan/memory_model.hpp"

namespace loom::plan {

StateBytes model_state_bytes(int64_t params, int dp, int zero_stage, int64_t optimizer_bytes_per_param) {
  const int64_t n = dp > 0 ? dp : 1;
  auto sharded = [&](int64_t bytes, int from_stage) { return zero_stage >= from_stage ? bytes / n : bytes; };
  return StateBytes{sharded(4 * params, 3), sharded(4 * params, 2), sharded(optimizer_bytes_per_param * params, 1)};
}

}  // namespace loom::plan
