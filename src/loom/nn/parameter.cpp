#include "loom/nn/parameter.hpp"

#include "loom/error.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/nn/gemm_input.hpp"

namespace loom::nn {

Parameter::Parameter(std::string name, const Shape& shape, bool weight_decay)
    : name_(std::move(name)),
      shape_(shape),
      value_(Tensor::zeros(shape, DType::F32, MemoryCategory::Parameters)),
      grad_(Tensor::zeros(shape, DType::F32, MemoryCategory::Gradients)),
      weight_decay_(weight_decay) {}

Parameter::Parameter(std::string name, Tensor value_view, Tensor grad_view, bool weight_decay)
    : name_(std::move(name)),
      shape_(value_view.shape()),
      value_(std::move(value_view)),
      grad_(std::move(grad_view)),
      weight_decay_(weight_decay) {
  check(grad_.shape() == shape_, "parameter '", name_, "': gradient ", shape_str(grad_.shape()), " does not match value ",
        shape_str(shape_));
}

namespace {
void check_view(const std::string& name, const char* what, const Tensor& view, const Shape& shape) {
  check(view.shape() == shape, what, " of '", name, "': view ", shape_str(view.shape()), " does not match ",
        shape_str(shape));
}
}  // namespace

void Parameter::rebind_grad(Tensor view) {
  check_view(name_, "rebind_grad", view, shape_);
  view.copy_from(grad_);
  grad_ = std::move(view);
}

void Parameter::rebind_value(Tensor view) {
  check_view(name_, "rebind_value", view, shape_);
  value_ = std::move(view);
}

void Parameter::rebind_grad_storage(Tensor view) {
  check_view(name_, "rebind_grad_storage", view, shape_);
  grad_ = std::move(view);
}

kernels::Operand Parameter::gemm_operand() { return gemm_input(gemm_value()); }

const Tensor& Parameter::gemm_value() {
  if (bf16_only_) {
    check(kernels::compute_precision() == kernels::Precision::BF16, "parameter '", name_,
          "' is held in bf16 only (ZeRO with bf16 gathers): it cannot be read in fp32");
    return bf16_value_;
  }
  if (kept_in_fp32_ || kernels::compute_precision() == kernels::Precision::F32) return value_;
  const uint64_t generation = kernels::weights_generation();
  const bool refreshed = bf16_refreshed_ && bf16_refresh_epoch_ == kernels::weights_overwrite_epoch();
  if (!bf16_value_.defined() || (bf16_generation_ != generation && !refreshed) || bf16_source_ != value_.raw()) {
    if (!bf16_value_.defined()) {
      bf16_value_ = Tensor::empty(shape_, DType::BF16, MemoryCategory::Parameters);
      bf16_owned_ = true;
    }
    kernels::convert_to_bf16(value_.f32(), bf16_value_.bf16(), value_.numel());
    bf16_generation_ = generation;
    bf16_source_ = value_.raw();
    bf16_refreshed_ = false;
    ++bf16_conversions_;
  }
  return bf16_value_;
}

bfloat16* Parameter::bf16_copy_to_refresh() {
  const bool own_copy = bf16_value_.defined() && bf16_owned_ && !bf16_only_ && !kept_in_fp32_;
  return own_copy && value_.defined() && bf16_source_ == value_.raw() ? bf16_value_.bf16() : nullptr;
}

void Parameter::bf16_copy_refreshed() {
  bf16_refreshed_ = true;
  bf16_refresh_epoch_ = kernels::weights_overwrite_epoch();
}

void Parameter::rebind_bf16_value(Tensor view) {
  check_view(name_, "rebind_bf16_value", view, shape_);
  check(!kept_in_fp32_, "parameter '", name_, "' is kept in fp32 under mixed precision: it has no bf16 copy");
  check(view.dtype() == DType::BF16, "rebind_bf16_value of '", name_, "': the view is not bf16");
  bf16_value_ = std::move(view);
  bf16_generation_ = kernels::weights_generation();
  bf16_source_ = value_.raw();
  bf16_owned_ = false;
  bf16_refreshed_ = false;
}

void Parameter::bind_bf16_only(Tensor view) {
  check_view(name_, "bind_bf16_only", view, shape_);
  check(view.dtype() == DType::BF16, "bind_bf16_only of '", name_, "': the view is not bf16");
  check(read_only_by_gemms_, "parameter '", name_, "' is read outside GEMMs: it needs an fp32 value");
  check(!kept_in_fp32_, "parameter '", name_, "' is kept in fp32 under mixed precision: it cannot be held in bf16 only");
  value_ = Tensor();
  bf16_value_ = std::move(view);
  bf16_only_ = true;
  bf16_owned_ = false;
  bf16_refreshed_ = false;
}

void Parameter::grad_contributed() {
  if (++contributions_seen_ < contributions_per_backward_) return;
  contributions_seen_ = 0;
  for (auto& hook : grad_ready_hooks_) hook(*this);
}

}  // namespace loom::nn
