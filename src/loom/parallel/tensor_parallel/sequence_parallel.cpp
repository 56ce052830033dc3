#include "loom/parallel/tensor_parallel/sequence_parallel.hpp"

namespace loom::parallel::tp {

ReplicatedGradientSum::ReplicatedGradientSum(nn::Module& model, comm::ProcessGroup& group, bool every_backward,
                                             comm::ReduceOp op, const Predicate& replicated)
    : group_(group), every_backward_(every_backward), op_(op) {
  for (nn::Parameter* p : model.parameters())
    if (replicated ? replicated(*p) : !p->shard_spec().sharded())
      p->add_grad_ready_hook([this](nn::Parameter& q) {
        if (every_backward_ || sync_) group_.all_reduce(q.grad(), op_);
      });
}

}  // namespace loom::parallel::tp
