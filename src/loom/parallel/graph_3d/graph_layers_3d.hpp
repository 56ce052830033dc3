// The layer builder that makes a GCN Plexus-style 3D-parallel: every graph convolution
// becomes a GraphConv3D on the grid (rotating the axes' roles by layer), over the node
// orders of the double random permutation when `permute` is on. Each layer's block of Â is
// read alone from the graph's edges (read_graph, before the model asks for its layers), or,
// when the model is handed the whole Â instead, cut from it. Only GCNs: a linear layer
// request goes to the GPT's 3D builder it derives from.
#pragma once

#include <memory>
#include <string>

#include "loom/data/graph.hpp"
#include "loom/parallel/graph_3d/graph_conv_3d.hpp"
#include "loom/parallel/graph_3d/local_adjacency.hpp"
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

  // Streams source's edges once, keeping this rank's block of Â for each layer
  // (read_local_adjacency; every edge also to digest), over the node orders drawn here, or
  // `orders` when given (drawn by node_orders with this builder's permute and seed), each block
  // reserving its `counted` entries when given. Collective over the grid. The model may then
  // be built with no GraphOperator (null).
  const LocalAdjacency& read_graph(data::GraphSource& source, data::EdgeDigest& digest,
                                   std::shared_ptr<const NodeOrders> orders = nullptr,
                                   const BlockEntries* counted = nullptr) const;
  bool permute() const { return permute_; }
  uint64_t seed() const { return seed_; }

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
  // Drawn for the graph read or that of the first layer (the builder is const to the model).
  mutable std::shared_ptr<const NodeOrders> orders_;
  mutable std::shared_ptr<const nn::GraphOperator> graph_;  // the whole Â, when handed one
  mutable std::unique_ptr<LocalAdjacency> local_;           // or this rank's blocks, read alone
};

}  // namespace loom::parallel::graph3d
