#include "loom/parallel/pipeline/gpipe.hpp"

namespace loom::parallel::pipeline {

Schedule gpipe(int pp, int micro_batches) {
  Schedule s = make_schedule(pp, micro_batches);
  for (auto& actions : s.ranks) {
    for (int i = 0; i < micro_batches; ++i) actions.push_back({ActionKind::Forward, i});
    for (int i = 0; i < micro_batches; ++i) actions.push_back({ActionKind::Backward, i});
  }
  return with_transfers(s);
}

}  // namespace loom::parallel::pipeline
