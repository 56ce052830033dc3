#include "loom/parallel/graph_3d/graph_layers_3d.hpp"

#include <iomanip>
#include <sstream>

namespace loom::parallel::graph3d {

std::unique_ptr<nn::GraphConv> GraphLayers3D::graph_conv(int64_t in, int64_t out, int64_t layer,
                                                         std::shared_ptr<const nn::GraphOperator> graph,
                                                         bool input_gradient) const {
  if (!orders_) orders_ = node_orders(graph->adjacency.rows, permute_, seed_), graph_ = graph;
  auto conv = std::make_unique<GraphConv3D>(in, out, layer, std::move(graph), input_gradient, grid(), orders_,
                                             aggregation_chunks_);
  // Each layer reduces its own gradients over depth (backward_impl).
  keep_gradient_over_depth(conv->weight());
  keep_gradient_over_depth(conv->bias());
  return conv;
}

std::string GraphLayers3D::describe() const {
  if (!graph_) return "";
  const kernels::CsrMatrix& A = graph_->adjacency;
  std::ostringstream os;
  os << "graph_3d: " << grid().describe() << ", nodes " << (permute_ ? "randomly permuted" : "in file order")
     << "; non-zeros per rank max/mean";
  for (int64_t l = 0; l < layers_; ++l) {
    const Roles r = Roles::of(l);
    os << (l == 0 ? " " : ", ") << "layer " << l << " " << std::fixed << std::setprecision(3)
       << block_imbalance(A, *orders_, l, grid().size(r.depth), grid().size(r.outer));
  }
  return os.str();
}

}  // namespace loom::parallel::graph3d
