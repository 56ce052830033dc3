// Parameter: a trainable tensor with its gradient and a stable dotted name
// ("blocks.0.attn.qkv.weight"). The grad-ready hook fires once per backward pass, when
// every contribution to the gradient has been added (a tied weight gets two), which is
// the moment a data-parallel wrapper may start reducing it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "loom/tensor/tensor.hpp"

namespace loom::nn {

class Parameter {
 public:
  using GradReadyHook = std::function<void(Parameter&)>;

  Parameter(std::string name, const Shape& shape, bool weight_decay);

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  Tensor& value() { return value_; }
  const Tensor& value() const { return value_; }
  Tensor& grad() { return grad_; }
  const Tensor& grad() const { return grad_; }
  int64_t numel() const { return value_.numel(); }
  // Makes grad() a view into storage owned elsewhere (a data-parallel gradient bucket),
  // keeping its current values, so reductions run on the gradients in place.
  void rebind_grad(Tensor view);
  // AdamW decays matrices, not biases or LayerNorm gains.
  bool weight_decay() const { return weight_decay_; }

  // A parameter used k times per forward (a tied embedding) receives k contributions.
  void set_contributions_per_backward(int k) { contributions_per_backward_ = k; }
  // Called by a module's backward after it has added its share to grad().
  void grad_contributed();
  void add_grad_ready_hook(GradReadyHook hook) { grad_ready_hooks_.push_back(std::move(hook)); }

 private:
  std::string name_;
  Tensor value_;  // category Parameters
  Tensor grad_;   // category Gradients, same shape; accumulated across micro-batches
  bool weight_decay_;
  int contributions_per_backward_ = 1;
  int contributions_seen_ = 0;
  std::vector<GradReadyHook> grad_ready_hooks_;
};

}  // namespace loom::nn
