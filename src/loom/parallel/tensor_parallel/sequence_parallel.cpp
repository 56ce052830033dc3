#include "loom/parallel/tensor_parallel/sequence_parallel.hpp"

#include <algorithm>
#include <chrono>

namespace loom::parallel::tp {

ReplicatedGradientSum::ReplicatedGradientSum(nn::Module& model, comm::ProcessGroup& group,
                                             const Predicate& every_backward, comm::ReduceOp op,
                                             const Predicate& replicated, bool deferred)
    : group_(group), op_(op), deferred_(deferred) {
  for (nn::Parameter* p : model.parameters())
    if (replicated ? replicated(*p) : !p->shard_spec().sharded())
      p->add_grad_ready_hook([this, each = every_backward && every_backward(*p)](nn::Parameter& q) {
        if (!each && !sync_) return;
        comm::Work sum = group_.all_reduce_async(q.grad().f32(), q.grad().numel(), op_);
        if (deferred_)
          in_flight_.push_back(std::move(sum));
        else
          sum.wait();
      });
}

void ReplicatedGradientSum::finish() {
  const auto start = std::chrono::steady_clock::now();
  double exposed = 0;  // up to the last sum's end, as every wait counts (comm/work.hpp)
  for (const comm::Work& sum : in_flight_) {
    sum.wait();
    exposed = std::max(exposed, sum.seconds_exposed_after(start));
  }
  in_flight_.clear();
  if (deferred_ && waited_) waited_(exposed);
}

}  // namespace loom::parallel::tp
