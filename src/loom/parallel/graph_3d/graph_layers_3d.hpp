// The layer builder that makes a GCN Plexus-style 3D-parallel: every graph convolution
// becomes a GraphConv3D on the grid (rotating the axes' roles by layer), over the node
// orders of the double random permutation when `permute` is on. Only GCNs: a linear layer
// request goes to the GPT's 3D builder it derives from.
#pragma once

#include <memory>
#include <string>

#include "loom/parallel/graph_3d/graph_conv_3d.hpp"
#include "loom/parallel/tensor_parallel_3d/layers_3d.hpp"

namespace loom::parallel::graph3d {

class GraphLayers3D : public tp3d::Layers3D {
 public:
  // layers: the GCN's graph convolutions; aggregation_chunks: each one's blocked aggregation
  // (GraphConv3D::aggregate).
  GraphLayers3D(const Grid3D& grid, int64_t layers, bool permute, uint64_t seed, int64_t aggregation_chunks = 1)
      : tp3d::Layers3D(grid),
        layers_(layers),
        permute_(permute),
        seed_(seed),
        aggregation_chunks_(aggregation_chunks) {}

  std::unique_ptr<nn::GraphConv> graph_conv(int64_t in, int64_t out, int64_t layer,
                                            std::shared_ptr<const nn::GraphOperator> graph,
                                            bool input_gradient) const override;
  // "graph_3d: ..." for the log: the orders and the non-zero imbalance of each layer's blocks.
  // "" before the model asked for its layers.
  std::string describe() const;

 private:
  int64_t layers_;
  bool permute_;
  uint64_t seed_;
  int64_t aggregation_chunks_;
  mutable std::shared_ptr<const NodeOrders> orders_;  // drawn for the graph of the first layer
  mutable std::shared_ptr<const nn::GraphOperator> graph_;
};

}  // namespace loom::parallel::graph3d
