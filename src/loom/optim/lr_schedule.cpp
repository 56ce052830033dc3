#include "loom/optim/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

namespace loom::optim {

float LrSchedule::at(int64_t step) const {
  if (step < warmup_steps) return peak * static_cast<float>(step + 1) / static_cast<float>(warmup_steps);
  if (step >= decay_steps) return min;
  const double progress =
      static_cast<double>(step - warmup_steps) / static_cast<double>(std::max<int64_t>(1, decay_steps - warmup_steps));
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return static_cast<float>(min + cosine * (peak - min));
}

}  // namespace loom::optim
