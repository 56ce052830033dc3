#include "loom/parallel/finalize_gradients.hpp"

namespace loom::parallel {

bool reduce_during_last_backward(const GradientSync& sync, bool pipelined, int64_t chunks) {
  return !pipelined || sync.reduces_every_backward() || (!sync.shards_gradients() && chunks == 1);
}

void GradientFinalizer::before_backward(bool last) {
  if (parts_.replicated_sum != nullptr) parts_.replicated_sum->set_sync(last);
  if (parts_.context_mean != nullptr) parts_.context_mean->set_sync(last);
  parts_.sync->set_sync(last && parts_.reduce_during_backward);
}

void GradientFinalizer::finish() {
  if (parts_.replicated_sum != nullptr) parts_.replicated_sum->finish();
  // Reductions launched during the backwards; the table's copies are then summed (each
  // already a data-parallel mean; under ZeRO-2/3 its own unit's shards, alike on both stages);
  // deferred reductions run on the summed table.
  if (parts_.reduce_during_backward) parts_.sync->finish_gradient_sync();
  if (parts_.token_table != nullptr) {
    Tensor table = parts_.sync->gradient_held(*parts_.token_table);
    parts_.embedding_group->all_reduce(table, comm::ReduceOp::Sum);
  }
  if (!parts_.reduce_during_backward) {
    parts_.sync->sync_now();
    parts_.sync->finish_gradient_sync();
  }
}

double GradientFinalizer::grad_sum_squares() {
  double sum = parts_.sync->grad_sum_squares(parts_.counted);
  for (comm::ProcessGroup* g : parts_.model_parallel_groups)
    if (g->size() > 1) {
      float s = static_cast<float>(sum);
      g->all_reduce(&s, 1, comm::ReduceOp::Sum);
      sum = s;
    }
  return sum;
}

}  // namespace loom::parallel
