// Per-rank model-state memory of data-parallel training (Rajbhandari et al., ZeRO, 2020):
// with P parameters, N data-parallel ranks and fp32 Adam (4 bytes value, 4 grad, 8 moments),
//   stage 0 (DDP) 16P; stage 1 (optimizer sharded) 8P + 8P/N; stage 2 (+ grads) 4P + 12P/N;
//   stage 3 (+ parameters) 16P/N. Pure functions: the trainer prints them next to what the
// memory tracker measured, and the planner prices layouts with them.
#pragma once

#include <cstdint>

namespace loom::plan {

struct StateBytes {
  int64_t params = 0;
  int64_t grads = 0;
  int64_t optimizer = 0;
  int64_t total() const { return params + grads + optimizer; }
};

// optimizer_bytes_per_param: 8 for AdamW (two moments), 4 for SGD with momentum.
StateBytes model_state_bytes(int64_t params, int dp, int zero_stage, int64_t optimizer_bytes_per_param);

}  // namespace loom::plan
