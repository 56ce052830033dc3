#include "loom/parallel/pipeline/interleaved_1f1b.hpp"

#include <algorithm>

#include "loom/error.hpp"
#include "loom/parallel/pipeline/one_f_one_b.hpp"

namespace loom::parallel::pipeline {

namespace {

// The k-th forward (or backward) a rank runs, as Megatron numbers them: within each group of
// p micro-batches, p forwards per chunk in chunk order (backwards: reverse chunk order).
Action nth_action(ActionKind kind, int k, int pp, int chunks) {
  const int in_group = k % (pp * chunks);
  const int chunk = in_group / pp;
  return {kind, k / (pp * chunks) * pp + k % pp, kind == ActionKind::Forward ? chunk : chunks - 1 - chunk};
}

}  // namespace

Schedule interleaved_1f1b(int pp, int micro_batches, int chunks) {
  if (chunks == 1) return one_f_one_b(pp, micro_batches);
  Schedule s = make_schedule(pp, micro_batches, chunks);
  check(micro_batches % pp == 0, "the interleaved schedule needs the micro-batches (", micro_batches,
        ") to be a multiple of pp (", pp, ")");
  const int total = micro_batches * chunks;
  for (int r = 0; r < pp; ++r) {
    std::vector<Action>& actions = s.ranks[r];
    const int warmup = std::min(2 * (pp - r - 1) + (chunks - 1) * pp, total);
    const int steady = total - warmup;
    for (int k = 0; k < warmup; ++k) actions.push_back(nth_action(ActionKind::Forward, k, pp, chunks));
    for (int k = 0; k < steady; ++k) {
      actions.push_back(nth_action(ActionKind::Forward, warmup + k, pp, chunks));
      actions.push_back(nth_action(ActionKind::Backward, k, pp, chunks));
    }
    for (int k = steady; k < total; ++k) actions.push_back(nth_action(ActionKind::Backward, k, pp, chunks));
  }
  return with_transfers(s);
}

}  // namespace loom::parallel::pipeline
