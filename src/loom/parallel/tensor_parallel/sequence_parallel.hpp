// Under sequence parallelism each rank computes the LayerNorm, position-embedding and
// row-parallel-bias gradients from its own chunk of the sequence only, so these replicated
// parameters' gradients are partial: they are summed over the tensor-parallel group as each
// becomes ready (from a grad-ready hook installed before DDP's or ZeRO's, so the sum comes
// before data parallelism reduces it), and every replica steps alike.
#pragma once

#include "loom/comm/process_group.hpp"
#include "loom/nn/module.hpp"

namespace loom::parallel::tp {

class ReplicatedGradientSum {
 public:
  // every_backward: the gradients hold only the current backward's contribution (ZeRO-2/3
  // give each backward fresh buffers), so each is summed; otherwise they accumulate over
  // micro-batches and are summed once, in the backward with sync on (summing the running
  // total every time would count earlier micro-batches again).
  // op: Sum (sequence parallelism's partial gradients) or Avg (context parallelism's replicas).
  ReplicatedGradientSum(nn::Module& model, comm::ProcessGroup& group, bool every_backward,
                        comm::ReduceOp op = comm::ReduceOp::Sum);
  void set_sync(bool on) { sync_ = on; }

 private:
  comm::ProcessGroup& group_;
  bool every_backward_;
  comm::ReduceOp op_;
  bool sync_ = true;
};

}  // namespace loom::parallel::tp
