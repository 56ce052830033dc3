#include "loom/parallel/pipeline/held_activations.hpp"

#include <algorithm>

#include "loom/error.hpp"

namespace loom::parallel::pipeline {

int64_t peak_held_bytes(const std::vector<Action>& actions, const std::vector<int64_t>& chunk_bytes) {
  int64_t held = 0, peak = 0;
  for (const Action& a : actions) {
    if (a.kind != ActionKind::Forward && a.kind != ActionKind::Backward) continue;
    check(a.chunk >= 0 && a.chunk < static_cast<int>(chunk_bytes.size()), to_string(a), " names chunk ", a.chunk,
          ", but the rank holds ", chunk_bytes.size());
    held += (a.kind == ActionKind::Forward ? 1 : -1) * chunk_bytes[static_cast<size_t>(a.chunk)];
    peak = std::max(peak, held);
  }
  return peak;
}

}  // namespace loom::parallel::pipeline
