#include "loom/parallel/tensor_parallel/sequence_parallel.hpp"

namespace loom::parallel::tp {

void sum_replicated_gradients(nn::Module& model, comm::ProcessGroup& group) {
  for (nn::Parameter* p : model.parameters())
    if (!p->shard_spec().sharded())
      p->add_grad_ready_hook([&group](nn::Parameter& q) { group.all_reduce(q.grad(), comm::ReduceOp::Sum); });
}

}  // namespace loom::parallel::tp
