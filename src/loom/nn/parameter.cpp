#include "loom/nn/parameter.hpp"

#include "loom/error.hpp"

namespace loom::nn {

Parameter::Parameter(std::string name, const Shape& shape, bool weight_decay)
    : name_(std::move(name)),
      value_(Tensor::zeros(shape, DType::F32, MemoryCategory::Parameters)),
      grad_(Tensor::zeros(shape, DType::F32, MemoryCategory::Gradients)),
      weight_decay_(weight_decay) {}

void Parameter::rebind_grad(Tensor view) {
  check(view.shape() == value_.shape(), "rebind_grad of '", name_, "': view ", shape_str(view.shape()),
        " does not match ", shape_str(value_.shape()));
  view.copy_from(grad_);
  grad_ = std::move(view);
}

void Parameter::grad_contributed() {
  if (++contributions_seen_ < contributions_per_backward_) return;
  contributions_seen_ = 0;
  for (auto& hook : grad_ready_hooks_) hook(*this);
}

}  // namespace loom::nn
