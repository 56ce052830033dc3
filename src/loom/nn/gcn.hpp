// The graph convolutional network of Kipf & Welling (2017) for semi-supervised node
// classification, trained on the whole graph at once: L GraphConv layers, ReLU and dropout
// between them (as pygcn places them), the last layer's output the class logits of every
// node. Its layers come from the LayerBuilder, so a parallel substitute (a 3D-parallel
// GraphConv) replaces them without changing this code. Dropout is keyed by (seed, step,
// layer), so a run and its resume draw the same masks.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "loom/nn/graph_conv.hpp"
#include "loom/nn/layer_builder.hpp"
#include "loom/nn/module.hpp"

namespace loom::nn {

struct GcnConfig {
  int64_t layers = 2;    // L graph convolutions
  int64_t hidden = 16;   // H: the width of every hidden layer
  double dropout = 0.5;  // p, between layers, while training
  // Throws loom::Error naming every impossible value.
  void validate() const;
  // Parameters for F input features and K classes.
  int64_t num_parameters(int64_t F, int64_t K) const;
};

// Whether dropout is on, and the step its masks are drawn for.
struct DropoutMode {
  bool training = false;
  uint64_t seed = 0, step = 0;
};

class GCN : public Module {
 public:
  // F input features, K classes; weights Glorot-uniform from seed (as Kipf & Welling), biases 0.
  GCN(const GcnConfig& config, int64_t F, int64_t K, std::shared_ptr<const GraphOperator> graph, uint64_t seed,
      const LayerBuilder& layers);

  // Training at step (dropout on, its masks drawn for this step), or evaluation (dropout off).
  void train_mode(uint64_t step) { mode_->training = true, mode_->step = step; }
  void eval_mode() { mode_->training = false; }
  const std::vector<GraphConv*>& convs() const { return convs_; }
  const GraphOperator& graph() const { return *graph_; }

 protected:
  // x (N, F) node features -> (N, K) logits.
  Tensor forward_impl(const Tensor& x, Context& ctx) override;
  Tensor backward_impl(const Tensor& dlogits, Context& ctx) override;

 private:
  std::shared_ptr<const GraphOperator> graph_;
  std::shared_ptr<DropoutMode> mode_;
  std::vector<GraphConv*> convs_;
  std::vector<Module*> activations_;  // ReLU + dropout after every conv but the last
};

}  // namespace loom::nn
