// The steps `loom train --trace` records: trace_steps "5:8" (or "5"), by default 2:4.
#pragma once

#include <cstdint>
#include <string>

namespace loom::train {

struct TraceSteps {
  int64_t first = 0, last = 0;  // 1-based optimizer steps, inclusive
};
// "5:8" (or "5" for one step); "" gives the default window; clipped to the run's steps.
// loom::Error naming the text when malformed or outside 1..steps.
TraceSteps parse_trace_steps(const std::string& text, int64_t steps);

}  // namespace loom::train
