#include "loom/nn/module.hpp"

#include <algorithm>

#include "loom/trace/recorder.hpp"

namespace loom::nn {

std::string join_name(const std::string& prefix, const std::string& local) {
  return prefix.empty() ? local : prefix + "." + local;
}

Tensor Module::forward(const Tensor& x, Context& ctx) {
  trace::Span span("forward", name_.empty() ? std::string_view("model") : std::string_view(name_));
  for (auto& hook : pre_forward_hooks_) hook(*this, ctx);
  Tensor y = forward_impl(x, ctx);
  for (auto& hook : post_forward_hooks_) hook(*this, ctx);
  return y;
}

Tensor Module::backward(const Tensor& dy, Context& ctx) {
  trace::Span span("backward", name_.empty() ? std::string_view("model") : std::string_view(name_));
  for (auto& hook : pre_backward_hooks_) hook(*this, ctx);
  Tensor dx = backward_impl(dy, ctx);
  for (auto& hook : post_backward_hooks_) hook(*this, ctx);
  return dx;
}

Parameter& Module::register_parameter(const std::string& local_name, const Shape& shape,
                                      bool weight_decay) {
  params_.emplace_back(local_name, std::make_unique<Parameter>(join_name(name_, local_name), shape, weight_decay));
  return *params_.back().second;
}

void Module::adopt(const std::string& local_name, std::unique_ptr<Module> child) {
  child->rename(join_name(name_, local_name));
  children_.emplace_back(local_name, std::move(child));
}

void Module::rename(const std::string& name) {
  name_ = name;
  for (auto& [local, p] : params_) p->set_name(join_name(name_, local));
  for (auto& [local, c] : children_) c->rename(join_name(name_, local));
}

void Module::collect(std::vector<Parameter*>& out) {
  for (auto& [local, p] : params_) out.push_back(p.get());
  for (auto& [local, c] : children_) c->collect(out);
}

std::vector<Parameter*> Module::parameters() {
  std::vector<Parameter*> out;
  collect(out);
  return out;
}

std::vector<Module*> Module::children() const {
  std::vector<Module*> out;
  for (const auto& [local, c] : children_) out.push_back(c.get());
  return out;
}

int64_t Module::num_parameters() {
  int64_t n = 0;
  for (Parameter* p : parameters()) n += p->numel();
  return n;
}

void Module::zero_grad() {
  for (Parameter* p : parameters())
    if (p->grad().defined()) p->grad().zero_();  // sharded training drops full gradients between steps
}

}  // namespace loom::nn
