// 1F1B, the PipeDream-flush schedule (Narayanan et al. 2021; Megatron-LM's default): rank r
// runs p - r - 1 warm-up forwards, then alternates one forward with one backward, then
// finishes the remaining backwards (cool-down). Same bubble as GPipe, (p - 1)/m, but rank r
// holds at most min(m, p - r) micro-batches of activations instead of m.
#pragma once

#include "loom/parallel/pipeline/schedule.hpp"

namespace loom::parallel::pipeline {

Schedule one_f_one_b(int pp, int micro_batches);

}  // namespace loom::parallel::pipeline
