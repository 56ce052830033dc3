#include "loom/nn/parameter.hpp"

namespace loom::nn {

Parameter::Parameter(std::string name, const Shape& shape, bool weight_decay)
    : name_(std::move(name)),
      value_(Tensor::zeros(shape, DType::F32, MemoryCategory::Parameters)),
      grad_(Tensor::zeros(shape, DType::F32, MemoryCategory::Gradients)),
      weight_decay_(weight_decay) {}

void Parameter::grad_contributed() {
  if (++contributions_seen_ < contributions_per_backward_) return;
  contributions_seen_ = 0;
  for (auto& hook : grad_ready_hooks_) hook(*this);
}

}  // namespace loom::nn
