#include "loom/parallel/pipeline/one_f_one_b.hpp"

#include <algorithm>

namespace loom::parallel::pipeline {

Schedule one_f_one_b(int pp, int micro_batches) {
  Schedule s = make_schedule(pp, micro_batches);
  for (int r = 0; r < pp; ++r) {
    std::vector<Action>& actions = s.ranks[r];
    const int warmup = std::min(pp - r - 1, micro_batches);
    const int steady = micro_batches - warmup;
    for (int i = 0; i < warmup; ++i) actions.push_back({ActionKind::Forward, i});
    for (int i = 0; i < steady; ++i) {
      actions.push_back({ActionKind::Forward, warmup + i});
      actions.push_back({ActionKind::Backward, i});
    }
    for (int i = steady; i < micro_batches; ++i) actions.push_back({ActionKind::Backward, i});
  }
  return with_transfers(s);
}

}  // namespace loom::parallel::pipeline
