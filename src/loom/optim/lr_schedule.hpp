// Learning-rate schedule: linear warm-up to the peak, then cosine decay to a floor
// (GPT-3 / nanoGPT). A pure function of the step, so resume needs no schedule state.
#pragma once

#include <cstdint>

namespace loom::optim {

struct LrSchedule {
  float peak = 1e-3f;
  float min = 1e-4f;
  int64_t warmup_steps = 100;
  int64_t decay_steps = 5000;  // step at which the floor is reached

  float at(int64_t step) const;  // step is 0-based
};

}  // namespace loom::optim
