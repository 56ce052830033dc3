#include "loom/parallel/graph_3d/graph_layers_3d.hpp"

#include <iomanip>
#include <sstream>

#include "loom/error.hpp"

namespace loom::parallel::graph3d {

const LocalAdjacency& GraphLayers3D::read_graph(data::GraphSource& source, data::EdgeDigest& digest,
                                                std::shared_ptr<const NodeOrders> orders,
                                                const BlockEntries* counted) const {
  const int64_t N = source.nodes().num_nodes;
  orders_ = orders ? std::move(orders) : node_orders(N, permute_, seed_);
  check(static_cast<int64_t>(orders_->order[0].size()) == N, "graph_3d: node orders of ", orders_->order[0].size(),
        " nodes for a graph of ", N);
  local_ = std::make_unique<LocalAdjacency>(read_local_adjacency(source, grid(), *orders_, layers_, digest, counted));
  return *local_;
}

std::unique_ptr<nn::GraphConv> GraphLayers3D::graph_conv(int64_t in, int64_t out, int64_t layer,
                                                         std::shared_ptr<const nn::GraphOperator> graph,
                                                         bool input_gradient) const {
  kernels::CsrMatrix block;
  int64_t nodes = 0;
  if (local_) {
    check(layer < static_cast<int64_t>(local_->blocks.size()) && orders_, "graph_3d: layer ", layer,
          " of a GCN read for ", local_->blocks.size(), " layers, each asked for once");
    nodes = local_->nodes;
    block = std::move(local_->blocks[static_cast<size_t>(layer)]);  // the layer's, asked for once
  } else {
    check(graph != nullptr, "graph_3d: no graph read (read_graph) and none handed to layer ", layer);
    const kernels::CsrMatrix& A = graph->adjacency;
    nodes = A.rows;
    if (!orders_) orders_ = node_orders(nodes, permute_, seed_), graph_ = graph;
    const Roles r = Roles::of(layer);
    const auto [c0, c1] = part_range(nodes, grid().size(r.outer), grid().rank(r.outer));
    const auto [r0, r1] = part_range(nodes, grid().size(r.depth), grid().rank(r.depth));
    const std::vector<int64_t>& rows = orders_->rows_of(layer);
    block = adjacency_block(A, {rows.begin() + r0, rows.begin() + r1}, orders_->column_positions_of(layer), c0, c1);
  }
  auto conv = std::make_unique<GraphConv3D>(in, out, layer, nodes, std::move(block), input_gradient, grid(), *orders_,
                                             aggregation_chunks_);
  // Read alone, the last layer asked for: every layer holds its lists of nodes now, and nothing
  // needs the N-long orders again (32 bytes a node, released).
  if (local_ && layer + 1 == layers_) orders_.reset();
  // Each layer reduces its own gradients over depth (backward_impl).
  keep_gradient_over_depth(conv->weight());
  keep_gradient_over_depth(conv->bias());
  return conv;
}

std::string GraphLayers3D::describe() const {
  if (!graph_ && !local_) return "";
  std::ostringstream os;
  os << "graph_3d: " << grid().describe() << ", nodes " << (permute_ ? "randomly permuted" : "in file order")
     << "; non-zeros per rank max/mean";
  for (int64_t l = 0; l < layers_; ++l) {
    const Roles r = Roles::of(l);
    os << (l == 0 ? " " : ", ") << "layer " << l << " " << std::fixed << std::setprecision(3)
       << (local_ ? local_->imbalance[static_cast<size_t>(l)]
                  : block_imbalance(graph_->adjacency, *orders_, l, grid().size(r.depth), grid().size(r.outer)));
  }
  return os.str();
}

}  // namespace loom::parallel::graph3d
