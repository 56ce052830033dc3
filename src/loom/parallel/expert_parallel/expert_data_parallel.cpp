#include "loom/parallel/expert_parallel/expert_data_parallel.hpp"

#include "loom/kernels/residual.hpp"
#include "loom/parallel/zero.hpp"

namespace loom::parallel::ep {

bool is_expert_parameter(const nn::Parameter& p) { return p.shard_spec().axis == nn::ShardSpec::kExpertAxis; }

ExpertDataParallel::ExpertDataParallel(nn::Module& model, std::unique_ptr<GradientSync> dense,
                                       comm::ProcessGroup& expert_dp, const comm::ProcessGroup& ep, DdpOptions options,
                                       bool experts_after_backward)
    : expert_scale_(1.0f / static_cast<float>(ep.size())),
      dense_counted_(ep.rank() == 0),
      experts_after_backward_(experts_after_backward),
      dense_(std::move(dense)) {
  for (nn::Parameter* p : model.parameters())
    if (is_expert_parameter(*p)) expert_params_.push_back(p);
  options.only = [](const nn::Parameter& p) { return is_expert_parameter(p); };
  if (expert_dp.size() > 1 && !expert_params_.empty())
    experts_ = std::make_unique<DistributedDataParallel>(model, expert_dp, options);
}

std::vector<nn::Parameter*> ExpertDataParallel::optimizer_parameters() const {
  std::vector<nn::Parameter*> out;
  for (nn::Parameter* p : dense_->optimizer_parameters())
    if (!is_expert_parameter(*p)) out.push_back(p);
  out.insert(out.end(), expert_params_.begin(), expert_params_.end());
  return out;
}

void ExpertDataParallel::set_sync(bool on) {
  dense_->set_sync(on);
  if (experts_) experts_->set_sync(on && !experts_after_backward_);
}

void ExpertDataParallel::sync_now() {
  dense_->sync_now();
  if (experts_) experts_->sync_now();
}

void ExpertDataParallel::finish_gradient_sync() {
  dense_->finish_gradient_sync();
  if (experts_ && experts_after_backward_) experts_->sync_now();
  if (experts_) experts_->finish_gradient_sync();
  for (nn::Parameter* p : expert_params_) kernels::scale_inplace(p->grad().f32(), expert_scale_, p->numel());
}

double ExpertDataParallel::grad_sum_squares(const ParameterFilter& counted) {
  const auto dense = [&counted](const nn::Parameter& p) { return !is_expert_parameter(p) && (!counted || counted(p)); };
  const auto expert = [&counted](const nn::Parameter& p) { return is_expert_parameter(p) && (!counted || counted(p)); };
  const double d = dense_->grad_sum_squares(dense);  // collective under ZeRO: every rank calls it
  return (dense_counted_ ? d : 0.0) + sum_squares_of(expert_params_, expert);
}

double ExpertDataParallel::comm_seconds() const {
  return dense_->comm_seconds() + (experts_ ? experts_->comm_seconds() : 0.0);
}

double ExpertDataParallel::exposed_comm_seconds() const {
  return dense_->exposed_comm_seconds() + (experts_ ? experts_->exposed_comm_seconds() : 0.0);
}

ShardedDataParallel* ExpertDataParallel::sharded() const { return dynamic_cast<ShardedDataParallel*>(dense_.get()); }

}  // namespace loom::parallel::ep
