// What a pipeline rank holds for backward as it runs its part of a schedule: each forward of a
// (micro-batch, chunk) keeps that chunk's activations until the backward of the same pair frees
// them. The memory check (train/memory_budget.hpp) and the planner (plan/layout_cost.cpp) price a
// rank's activations with it, over the very action list the executor runs.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/parallel/pipeline/schedule.hpp"

namespace loom::parallel::pipeline {

// The most bytes held at once over `actions` (one rank's list; transfers ignored), where one
// micro-batch keeps chunk_bytes[c] through this rank's chunk c.
int64_t peak_held_bytes(const std::vector<Action>& actions, const std::vector<int64_t>& chunk_bytes);

}  // namespace loom::parallel::pipeline
