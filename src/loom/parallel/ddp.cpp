#include "loom/parallel/ddp.hpp"

#include <chrono>

#include "loom/error.hpp"

namespace loom::parallel {

DistributedDataParallel::DistributedDataParallel(nn::Module& model, comm::ProcessGroup& group, DdpOptions options)
    : group_(group), options_(options) {
  check(options_.bucket_bytes > 0, "DDP bucket size must be > 0 bytes, got ", options_.bucket_bytes);
  for (nn::Parameter* p : model.parameters())
    if (!options_.only || options_.only(*p)) params_.push_back(p);
  const std::vector<nn::Parameter*>& params = params_;
  for (nn::Parameter* p : params) group_.broadcast(p->value(), 0);

  // Reverse registration order, cut into buckets of at most bucket_bytes (a larger
  // parameter gets a bucket of its own).
  std::vector<std::vector<nn::Parameter*>> groups(1);
  int64_t bytes = 0;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    const int64_t b = (*it)->grad().nbytes();
    if (!groups.back().empty() && bytes + b > options_.bucket_bytes) {
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(*it);
    bytes += b;
  }
  for (auto& members : groups) {
    Bucket bucket;
    bucket.params = members;
    int64_t numel = 0;
    for (nn::Parameter* p : members) numel += p->numel();
    bucket.flat = Tensor::zeros({numel}, DType::F32, MemoryCategory::Gradients);
    int64_t offset = 0;
    for (nn::Parameter* p : members) {
      p->rebind_grad(bucket.flat.narrow(offset, p->numel()).view(p->shape()));
      offset += p->numel();
    }
    bucket.pending = static_cast<int>(members.size());
    buckets_.push_back(std::move(bucket));
  }
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (nn::Parameter* p : buckets_[b].params)
      p->add_grad_ready_hook([this, b](nn::Parameter&) { on_grad_ready(static_cast<int>(b)); });
}

void DistributedDataParallel::on_grad_ready(int b) {
  Bucket& bucket = buckets_[b];
  if (--bucket.pending > 0) return;
  bucket.pending = static_cast<int>(bucket.params.size());  // ready for the next backward
  if (sync_) launch(b);
}

void DistributedDataParallel::launch(int b) {
  Bucket& bucket = buckets_[b];
  bucket.work = options_.reduce_in_bf16
                    ? group_.all_reduce_bf16_async(bucket.flat.f32(), bucket.flat.numel(), comm::ReduceOp::Avg)
                    : group_.all_reduce_async(bucket.flat.f32(), bucket.flat.numel(), comm::ReduceOp::Avg, options_.algorithm);
  bucket.launched = true;
  launch_order_.push_back(b);
}

void DistributedDataParallel::sync_now() {
  sync_ = true;
  launched_before_sync_now_ = static_cast<int64_t>(launch_order_.size());
  for (int b = 0; b < static_cast<int>(buckets_.size()); ++b)
    if (!buckets_[b].launched) launch(b);
}

void DistributedDataParallel::finish_gradient_sync() {
  if (!sync_) return;
  launched_during_backward_ =
      launched_before_sync_now_ >= 0 ? launched_before_sync_now_ : static_cast<int64_t>(launch_order_.size());
  launched_before_sync_now_ = -1;
  finished_during_backward_ = 0;
  for (int64_t i = 0; i < launched_during_backward_; ++i)
    finished_during_backward_ += buckets_[launch_order_[i]].work.is_done() ? 1 : 0;
  const auto wait_start = std::chrono::steady_clock::now();
  comm_seconds_ = 0.0;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    check(bucket.launched, "DDP: bucket ", b, " was never ready: a parameter received no gradient in backward "
          "(every parameter must be used in forward)");
    bucket.work.wait();
    bucket.launched = false;
    comm_seconds_ += bucket.work.busy_seconds();
  }
  exposed_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_start).count();
  last_launch_order_.swap(launch_order_);
  launch_order_.clear();
}

}  // namespace loom::parallel
