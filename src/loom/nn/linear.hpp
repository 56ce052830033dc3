// Linear: y = x W^T + b over the last dimension, weight (OC, C) as PyTorch stores it.
// The two backward GEMMs (dx = dy W, dW += dy^T x) go through oneDNN.
#pragma once

#include "loom/kernels/packed_weights.hpp"
#include "loom/nn/module.hpp"

namespace loom::nn {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);

  Parameter& weight() { return *weight_; }
  Parameter* bias() { return bias_; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 protected:
  Tensor forward_impl(const Tensor& x, Context& ctx) override;
  Tensor backward_impl(const Tensor& dy, Context& ctx) override;
  // y = x W^T (+ b when add_bias). few_rows (inference contexts): at most kGemvMaxRows
  // rows go through the GEMV kernel, which streams W once (kernels/gemv.hpp), and up to
  // kPackedMaxRows through oneDNN on `packed` copies of W when given (kernels/packed_weights.hpp).
  Tensor project(const Tensor& x, bool add_bias, bool few_rows = false, kernels::PackedWeights* packed = nullptr);
  // Given the forward's input x: returns dx = dy W, adds dy^T x to W's gradient and (when
  // bias_grad) dy's column sums to the bias gradient.
  Tensor backward_from(const Tensor& dy, const Tensor& x, bool bias_grad);
  // The GEMMs of project and backward_from on `rows` rows, for layers that run them piece by
  // piece around their communication: y = x W^T (+ b), dx = dy W, W's gradient += dy^T x
  // (then marked contributed). dy in compute precision (in_compute_precision).
  void project_rows(kernels::Operand x, int64_t rows, float* y, bool add_bias);
  void input_gradient_rows(kernels::Operand dy, int64_t rows, float* dx);
  void add_weight_gradient(kernels::Operand dy, kernels::Operand x, int64_t rows);

  int64_t in_, out_;
  Parameter* weight_;  // (OC, C)
  Parameter* bias_;    // (OC) or null
};

}  // namespace loom::nn
