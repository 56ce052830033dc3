// GraphConv: one graph convolution of Kipf & Welling (2017), Y = Â X W + b, on the whole
// graph. Two orders compute it: aggregate first, (Â X) W, or transform first, Â (X W); the
// layer takes the one whose SpMM is narrower (min(in, out) columns), as pygcn does when
// features are wide. Backward is two GEMMs (oneDNN) and one SpMM with Âᵀ: dW = (ÂX)ᵀ dY,
// dX = Âᵀ (dY Wᵀ), or in the other order dS = Âᵀ dY, dW = Xᵀ dS, dX = dS Wᵀ. A first layer
// (no input gradient) whose input is mostly zeros (bag-of-words features: Cora's are 1.3%
// non-zero) multiplies it as a sparse matrix, X W and Xᵀ dS by SpMM, as Kipf & Welling's code
// does; the input is the data, the same tensor every step, so its CSR form is built once.
#pragma once

#include <memory>
#include <vector>

#include "loom/kernels/sparse.hpp"
#include "loom/nn/module.hpp"

namespace loom::nn {

// Â and its transpose, built once per graph and shared by every layer.
struct GraphOperator {
  kernels::CsrMatrix adjacency;   // Â (N, N)
  kernels::CsrMatrix transposed;  // Âᵀ (N, N)
  static std::shared_ptr<const GraphOperator> from(kernels::CsrMatrix adjacency);
};

class GraphConv : public Module {
 public:
  // input_gradient: whether backward computes dX (the first layer's input is the features,
  // which need none).
  GraphConv(int64_t in_features, int64_t out_features, std::shared_ptr<const GraphOperator> graph, bool input_gradient);

  Parameter& weight() { return *weight_; }
  Parameter& bias() { return *bias_; }
  bool aggregates_first() const { return aggregates_first(in_, out_); }
  // A layer of in -> out aggregates first when it does not narrow the features (Â X is then the
  // smaller product); else it transforms first (X W), where a first layer may read X sparse.
  static bool aggregates_first(int64_t in, int64_t out) { return in <= out; }
  // Whether an input x is multiplied as a sparse matrix by a first layer that transforms before
  // it aggregates (few enough non-zeros): its weight then has no bf16 copy.
  static bool multiplies_sparse(const Tensor& x);

  // Where this layer's output lies in the whole (N, out) output: the nodes its rows are and
  // the first of its columns (a parallel layer holds a block; nodes null: the whole output).
  struct OutputBlock {
    const std::vector<int64_t>* nodes = nullptr;
    int64_t col0 = 0;
  };
  virtual OutputBlock output_block() const { return {}; }
  // Sets the weight from the whole (in, out) matrix; a parallel layer keeps its block.
  virtual void set_weight(const Tensor& whole);
  // ||W||² of the whole weight (a parallel layer sums its blocks over the grid).
  virtual double weight_sum_squares();
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 protected:
  Tensor forward_impl(const Tensor& x, Context& ctx) override;
  Tensor backward_impl(const Tensor& dy, Context& ctx) override;

 protected:  // a parallel substitute derives from this layer
  // Its parameters are this rank's pieces: weight (weight_shape), bias (bias_size).
  GraphConv(int64_t in_features, int64_t out_features, std::shared_ptr<const GraphOperator> graph, bool input_gradient,
            const Shape& weight_shape, int64_t bias_size);
  int64_t in_, out_;
  std::shared_ptr<const GraphOperator> graph_;
  bool input_gradient_;
  Parameter* weight_;  // (in, out), as the paper writes H W
  Parameter* bias_;    // (out)

 private:
  // The sparse form of a first layer's input x, or null when x is dense or an activation.
  const kernels::CsrMatrix* sparse_input(const Tensor& x);
  Tensor sparse_source_;  // the input the CSR forms below were built from (shares its storage)
  bool source_is_sparse_ = false;
  kernels::CsrMatrix sparse_x_, sparse_xt_;  // X (N, in) and Xᵀ (in, N)
};

}  // namespace loom::nn
