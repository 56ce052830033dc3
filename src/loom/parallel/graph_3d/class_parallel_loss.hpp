// The GCN's softmax cross-entropy on the last GraphConv3D's output blocks, never gathered: a
// rank holds its nodes (its part over the layer's depth axis) and its classes (over outer),
// as a vocabulary-parallel loss holds its tokens' slice of the vocabulary. Per labelled node
// of its rows, the outer ranks all-reduce the max logit (a stable softmax), then the sum of
// exponentials and the target's logit, and the first class reaching the max (the prediction,
// as the serial loss takes the first); the depth ranks sum their nodes' losses and correct
// counts. Every rank gets the serial loss and accuracy; backward leaves each rank's block of
// dlogits in place. The targets are its rows' alone (targets_for), in the block's row order:
// no rank holds the whole graph's labels.
#pragma once

#include <memory>

#include "loom/nn/node_cross_entropy.hpp"
#include "loom/parallel/graph_3d/graph_conv_3d.hpp"

namespace loom::parallel::graph3d {

class ClassParallelNodeLoss : public nn::NodeCrossEntropy {
 public:
  // last: the model's last layer, whose output blocks this loss reads.
  explicit ClassParallelNodeLoss(const GraphConv3D& last) : last_(last) {}

  nn::NodeLoss operator()(Tensor& logits, const Tensor& targets, bool backward, float scale) const override;

 private:
  const GraphConv3D& last_;
};

// The loss for a GCN whose last layer is `last`: on its blocks when it is a GraphConv3D, else
// the serial loss on the whole logits.
std::unique_ptr<nn::NodeCrossEntropy> node_loss_for(const nn::GraphConv& last);
// The targets that loss takes, from the whole graph's (N) i32: a GraphConv3D's rows'
// (output_block().nodes, in order), else the whole.
Tensor targets_for(const nn::GraphConv& last, const Tensor& whole);

}  // namespace loom::parallel::graph3d
