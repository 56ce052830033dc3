#include "loom/parallel/expert_parallel/expert_data_parallel.hpp"

#include "loom/kernels/residual.hpp"

namespace loom::parallel::ep {

bool is_expert_parameter(const nn::Parameter& p) { return p.shard_spec().axis == nn::ShardSpec::kExpertAxis; }

ExpertDataParallel::ExpertDataParallel(nn::Module& model, comm::ProcessGroup& dp, comm::ProcessGroup& expert_dp,
                                       int64_t ep, DdpOptions options)
    : params_(model.parameters()), expert_scale_(1.0f / static_cast<float>(ep)) {
  for (nn::Parameter* p : params_)
    if (is_expert_parameter(*p)) expert_params_.push_back(p);
  DdpOptions dense = options, experts = options;
  dense.only = [](const nn::Parameter& p) { return !is_expert_parameter(p); };
  experts.only = [](const nn::Parameter& p) { return is_expert_parameter(p); };
  dense_ = std::make_unique<DistributedDataParallel>(model, dp, dense);
  if (expert_dp.size() > 1 && !expert_params_.empty()) experts_ = std::make_unique<DistributedDataParallel>(model, expert_dp, experts);
}

void ExpertDataParallel::set_sync(bool on) {
  dense_->set_sync(on);
  if (experts_) experts_->set_sync(on);
}

void ExpertDataParallel::sync_now() {
  dense_->sync_now();
  if (experts_) experts_->sync_now();
}

void ExpertDataParallel::finish_gradient_sync() {
  dense_->finish_gradient_sync();
  if (experts_) experts_->finish_gradient_sync();
  for (nn::Parameter* p : expert_params_) kernels::scale_inplace(p->grad().f32(), expert_scale_, p->numel());
}

double ExpertDataParallel::comm_seconds() const {
  return dense_->comm_seconds() + (experts_ ? experts_->comm_seconds() : 0.0);
}

double ExpertDataParallel::exposed_comm_seconds() const {
  return dense_->exposed_comm_seconds() + (experts_ ? experts_->exposed_comm_seconds() : 0.0);
}

}  // namespace loom::parallel::ep
