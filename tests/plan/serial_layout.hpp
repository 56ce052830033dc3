// The layout `loom train` runs without parallelism, as the planner's memory tests price it:
// one replica, the whole batch in one micro-batch, nothing recomputed.
#pragma once

#include <cstdint>

#include "loom/plan/layout_cost.hpp"

namespace loom::testing {

inline plan::Layout serial_layout(int64_t micro_batch) {
  plan::Layout l;
  l.micro_batch = micro_batch;
  l.recompute = false;
  l.sequence_parallel = false;
  return l;
}

}  // namespace loom::testing
