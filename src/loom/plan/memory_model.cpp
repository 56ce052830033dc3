#include "loom/plan/memory_model.hpp"

namespace loom::plan {

StateBytes model_state_bytes(int64_t params, int dp, int zero_stage, int64_t optimizer_bytes_per_param) {
  const int64_t n = dp > 0 ? dp : 1;
  auto sharded = [&](int64_t bytes, int from_stage) { return zero_stage >= from_stage ? bytes / n : bytes; };
  return StateBytes{sharded(4 * params, 3), sharded(4 * params, 2), sharded(optimizer_bytes_per_param * params, 1)};
}

int64_t activation_bytes_per_layer(int64_t B, int64_t T, int64_t C, int64_t NH, int64_t t, bool sequence_parallel,
                                   int64_t cp, bool selective) {
  if (cp > 1) T /= cp;                                // this rank's tokens
  const int64_t Tr = sequence_parallel ? T / t : T;  // tokens of the replicated regions held here
  const int64_t softmax = cp > 1 ? NH * B * T / t : selective ? 0 : NH * B * T * T / t;
  return 4 * (4 * B * Tr * C + 12 * B * T * C / t + softmax + 4 * B * Tr);
}

}  // namespace loom::plan
