// Module: a layer or model with an explicit forward and backward (docs/architecture.md).
// forward(x, ctx) saves what backward needs in ctx; backward(dy, ctx) returns dx and
// accumulates parameter gradients. Hooks before and after forward and backward (decision 2)
// are the seam for data parallelism: FSDP gathers a unit's parameters before its forward
// and backward and frees them after, without the model code knowing.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loom/nn/context.hpp"
#include "loom/nn/parameter.hpp"

namespace loom::nn {

class Module {
 public:
  using PreForwardHook = std::function<void(Module&, Context&)>;
  using PostForwardHook = std::function<void(Module&, Context&)>;
  using PreBackwardHook = std::function<void(Module&, Context&)>;
  using PostBackwardHook = std::function<void(Module&, Context&)>;

  explicit Module(std::string name = "") : name_(std::move(name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Runs the pre-forward hooks, this module's forward, then the post-forward hooks.
  Tensor forward(const Tensor& x, Context& ctx);
  // Runs the pre-backward hooks, this module's backward, then the post-backward hooks.
  Tensor backward(const Tensor& dy, Context& ctx);

  // Full dotted path from the root ("blocks.3.mlp"); "" for the root.
  const std::string& name() const { return name_; }
  // Every parameter of this module and its children, in registration order, each once.
  std::vector<Parameter*> parameters();
  std::vector<Module*> children() const;
  int64_t num_parameters();

  void add_pre_forward_hook(PreForwardHook hook) { pre_forward_hooks_.push_back(std::move(hook)); }
  void add_post_forward_hook(PostForwardHook hook) { post_forward_hooks_.push_back(std::move(hook)); }
  void add_pre_backward_hook(PreBackwardHook hook) { pre_backward_hooks_.push_back(std::move(hook)); }
  void add_post_backward_hook(PostBackwardHook hook) { post_backward_hooks_.push_back(std::move(hook)); }
  void zero_grad();

 protected:
  virtual Tensor forward_impl(const Tensor& x, Context& ctx) = 0;
  virtual Tensor backward_impl(const Tensor& dy, Context& ctx) = 0;

  Parameter& register_parameter(const std::string& local_name, const Shape& shape, bool weight_decay);
  template <class M>
  M& register_module(const std::string& local_name, std::unique_ptr<M> child) {
    M& ref = *child;
    adopt(local_name, std::move(child));
    return ref;
  }

 private:
  void adopt(const std::string& local_name, std::unique_ptr<Module> child);
  void rename(const std::string& name);
  void collect(std::vector<Parameter*>& out);

  std::string name_;
  std::vector<std::pair<std::string, std::unique_ptr<Parameter>>> params_;  // local name, param
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
  std::vector<PreForwardHook> pre_forward_hooks_;
  std::vector<PostForwardHook> post_forward_hooks_;
  std::vector<PreBackwardHook> pre_backward_hooks_;
  std::vector<PostBackwardHook> post_backward_hooks_;
};

std::string join_name(const std::string& prefix, const std::string& local);

}  // namespace loom::nn
