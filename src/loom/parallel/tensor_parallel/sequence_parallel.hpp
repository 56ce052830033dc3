// Under sequence parallelism each rank computes the LayerNorm, position-embedding and
// row-parallel-bias gradients from its own chunk of the sequence only, so these replicated
// parameters' gradients are partial: they are summed over the tensor-parallel group as each
// becomes ready (from a grad-ready hook installed before DDP's or ZeRO's, so the sum comes
// before data parallelism reduces it), and every replica steps alike.
// 3D tensor parallelism uses the same hooks to average over depth the gradients of every
// parameter not split over depth (LayerNorm, embedding, biases, serial fallbacks).
#pragma once

#include <functional>
#include <vector>

#include "loom/comm/process_group.hpp"
#include "loom/nn/module.hpp"

namespace loom::parallel::tp {

class ReplicatedGradientSum {
 public:
  // every_backward: the parameters whose gradients hold only the current backward's
  // contribution (ZeRO-2/3 give each backward fresh buffers), so each is summed; the others
  // (all of them when null) accumulate over micro-batches and are summed once, in the backward
  // with sync on (summing the running total every time would count earlier micro-batches again).
  // replicated: which parameters are reduced (default: those not split over tp); op: Sum,
  // or Avg for gradients that are each a mean over their rank's batch rows.
  // deferred: no other hook reads the gradients before finish() (no data parallelism: the
  // gradients stay local), so each sum is started and runs under the rest of backward
  // (tp_overlap); finish() waits for them. The same collectives either way: the same bits.
  using Predicate = std::function<bool(const nn::Parameter&)>;
  ReplicatedGradientSum(nn::Module& model, comm::ProcessGroup& group, const Predicate& every_backward,
                        comm::ReduceOp op = comm::ReduceOp::Sum, const Predicate& replicated = nullptr,
                        bool deferred = false);
  void set_sync(bool on) { sync_ = on; }
  // After the step's last backward, before anything reads the gradients: the deferred sums done.
  void finish();
  // Deferred sums: finish() reports the seconds it waited to sink (a grid's exposed time).
  void count_waits_into(std::function<void(double)> sink) { waited_ = std::move(sink); }

 private:
  comm::ProcessGroup& group_;
  comm::ReduceOp op_;
  bool deferred_;
  bool sync_ = true;
  std::vector<comm::Work> in_flight_;
  std::function<void(double)> waited_;
};

}  // namespace loom::parallel::tp
