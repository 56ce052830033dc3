// DistributedDataParallel (Li et al., "PyTorch Distributed", VLDB 2020; the seeds' data
// parallelism): every rank holds the whole model and a slice of the global batch; gradients
// are averaged over the data-parallel group. Parameters are grouped into buckets in reverse
// registration order (roughly the order backward produces them); each parameter's gradient
// lives in its bucket's flat buffer, and a bucket's all-reduce is launched asynchronously
// the moment its last gradient is ready, so it overlaps the rest of backward. The model's
// code does not change: everything hangs off grad-ready hooks.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/comm/process_group.hpp"
#include "loom/nn/module.hpp"
#include "loom/parallel/gradient_sync.hpp"

namespace loom::parallel {

struct DdpOptions {
  int64_t bucket_bytes = int64_t{25} << 20;  // PyTorch's default bucket_cap_mb = 25
  comm::AllReduceAlgorithm algorithm = comm::AllReduceAlgorithm::Mpi;
  // Mixed precision: all-reduce the fp32 buckets as bf16 on the wire (half the bytes; MPI's
  // algorithm only); the gradients stay fp32 buffers.
  bool reduce_in_bf16 = false;
  // The parameters this DDP holds and reduces; null: all of the model's (expert
  // parallelism reduces dense and expert parameters over different groups).
  ParameterFilter only{};
};

class DistributedDataParallel : public GradientSync {
 public:
  // Collective over group: broadcasts rank 0's parameters so all replicas start equal.
  DistributedDataParallel(nn::Module& model, comm::ProcessGroup& group, DdpOptions options = {});

  // Gradient accumulation: a backward with sync off launches no communication; gradients
  // add up locally until a backward with sync on (the last micro-batch).
  void set_sync(bool on) override { sync_ = on; }
  // Waits for every bucket launched during backward; afterwards each gradient is the
  // average over the group.
  void finish_gradient_sync() override;
  // Launches the all-reduce of every bucket not launched yet (a pipeline reduces once, after
  // its last backward, with sync off until then); finish_gradient_sync() then waits.
  void sync_now() override;

  std::vector<nn::Parameter*> optimizer_parameters() const override { return params_; }
  // Every replica holds the same averaged gradient: its own sum is the norm's (no communication).
  double grad_sum_squares(const ParameterFilter& counted) override { return sum_squares_of(params_, counted); }

  int64_t bucket_count() const { return static_cast<int64_t>(buckets_.size()); }
  const std::vector<nn::Parameter*>& bucket_params(int b) const { return buckets_[b].params; }
  // In the last synced step: buckets launched by grad-ready hooks during backward (not by
  // sync_now()), and how many of those had already finished by then (communication hidden
  // behind backward).
  int64_t launched_during_backward() const { return launched_during_backward_; }
  int64_t finished_during_backward() const { return finished_during_backward_; }
  // In the last synced step: seconds the bucket all-reduces took on the communication
  // thread, and seconds finish_gradient_sync() then waited for them (the part not hidden
  // behind backward).
  double comm_seconds() const override { return comm_seconds_; }
  double exposed_comm_seconds() const override { return exposed_seconds_; }
  // Bucket indices in the order their all-reduce was launched, in the last synced step.
  const std::vector<int>& launch_order() const { return last_launch_order_; }
  comm::ProcessGroup& group() { return group_; }

 private:
  struct Bucket {
    std::vector<nn::Parameter*> params;
    Tensor flat;  // (numel of all params) gradients, category Gradients
    int pending = 0;
    comm::Work work;
    bool launched = false;
  };
  void on_grad_ready(int bucket);
  void launch(int bucket);

  comm::ProcessGroup& group_;
  DdpOptions options_;
  std::vector<nn::Parameter*> params_;  // the model's, in registration order
  std::vector<Bucket> buckets_;
  bool sync_ = true;
  int64_t launched_during_backward_ = 0;
  int64_t launched_before_sync_now_ = -1;  // -1: sync_now() not called this step
  int64_t finished_during_backward_ = 0;
  double comm_seconds_ = 0.0, exposed_seconds_ = 0.0;
  std::vector<int> launch_order_, last_launch_order_;
};

}  // namespace loom::parallel
