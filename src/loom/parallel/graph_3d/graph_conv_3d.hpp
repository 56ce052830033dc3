// One graph convolution Y = Â X W + b split over a 3D grid, as Plexus (Mukhopadhyay et al.)
// builds it on AxoNN's grid. A layer gives the grid's axes three roles, rotated by layer
// index (l % 3 = 0: outer row, inner col, depth depth; 1: depth, row, col; 2: col, depth, row):
//   Â's rows (output nodes) over depth, its columns (input nodes) over outer;
//   X: rows over outer, features over inner;  W: rows over inner, columns over outer, and
//   each block's columns (with b's) sharded over depth;
//   Y: rows over depth, features over outer, the next layer's X exactly (its outer is this
//   layer's depth, its inner this layer's outer), so nothing moves between layers.
// Forward: the W block all-gathered over depth (W and b in one buffer), AGG = Â X (partial
// over outer: all-reduce), Y = AGG W (partial over inner: all-reduce) + b. Backward: dW = AGGᵀ
// dY and db (partial over depth: one reduce-scatter back to this rank's shard), dAGG = dY Wᵀ
// (the block gathered again; over outer), dX = Âᵀ dAGG (over depth). The first layer's input,
// the features, is sharded over depth too (input_shard(): its block's rows split over depth)
// and all-gathered in forward; the last layer's output stays in blocks and the loss is
// computed on them (class_parallel_loss.hpp). Widths are padded with zero features
// so every piece is equal: a layer's output to a multiple of outer x depth (W's columns split
// over both), a hidden layer's input likewise (the previous layer's output; padded weights
// get zero gradients and stay 0, and their shard specs' pad/pad2 leave them out of the whole
// tensors a checkpoint holds, so a padded grid saves and resumes the serial tensors). Under
// bf16 mixed precision the GEMMs read bf16 (the W block gathered as its shards' bf16 copies,
// made once a step) and the activation sums cross in bf16; the features' gather, the dW and db
// reduce-scatter, b and the loss stay fp32.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loom/nn/graph_conv.hpp"
#include "loom/parallel/graph_3d/node_layout.hpp"
#include "loom/parallel/tensor_parallel_3d/grid.hpp"

namespace loom::parallel::graph3d {

using tp3d::Axis;
using tp3d::Grid3D;

// The axes' roles in layer `layer`.
struct Roles {
  Axis outer, inner, depth;
  static Roles of(int64_t layer);
};

// x rounded up to a multiple of parts.
inline int64_t padded(int64_t x, int64_t parts) { return (x + parts - 1) / parts * parts; }

// One rank's widths in layer `layer` of (in, out) features: its input features (over inner),
// its output features (over outer) and its shard of the W block's columns (over depth).
struct LocalWidths {
  int64_t in, out, shard;
  static LocalWidths of(int64_t in, int64_t out, int64_t layer, const Grid3D& grid);
  // The same from the grid's sizes {row, col, depth} alone (before the grid exists).
  static LocalWidths of(int64_t in, int64_t out, int64_t layer, const std::array<int64_t, 3>& sizes);
};

class GraphConv3D : public nn::GraphConv {
 public:
  // block: this rank's block of Â for the layer (rows: its depth part of orders' rows, columns:
  // its outer part of the columns), of a graph of `nodes` nodes: cut from the whole Â
  // (adjacency_block) or read alone (local_adjacency.hpp). aggregation_chunks: the row ranges
  // of Plexus's blocked aggregation (aggregate()); 1: one SpMM, then one sum.
  // The layer keeps its rows' and columns' lists of nodes, not the orders.
  GraphConv3D(int64_t in, int64_t out, int64_t layer, int64_t nodes, kernels::CsrMatrix block, bool input_gradient,
              const Grid3D& grid, const NodeOrders& orders, int64_t aggregation_chunks = 1);

  OutputBlock output_block() const override;
  void set_weight(const Tensor& whole) override;
  // The first layer: this rank's shard of the whole (N, in) features, the input forward takes:
  // its block's input rows (over outer) split over depth, padded to equal parts with zero
  // rows, and its features (over inner).
  Tensor input_shard(const Tensor& whole) const;
  // The same from rows streamed past, no whole matrix held: rows(wanted, keep) calls keep(node,
  // its `in` values) for each node wanted(node) asks for, in any order (the shape of
  // data::GraphSource::for_each_feature_row).
  using RowStream = std::function<void(const std::function<bool(int64_t node)>& wanted,
                                       const std::function<void(int64_t node, const float* values)>& keep)>;
  Tensor input_shard(const RowStream& rows) const;
  double weight_sum_squares() override;
  const kernels::CsrMatrix& block() const { return block_; }
  // Bytes this layer holds of the graph: its block of Â and the transpose (CSR), and the lists
  // of its output and input rows' nodes.
  int64_t block_bytes() const;
  int64_t node_list_bytes() const;
  const Roles& roles() const { return roles_; }
  const Grid3D& grid() const { return grid_; }
  int64_t graph_nodes() const { return nodes_; }

 protected:
  Tensor forward_impl(const Tensor& x, nn::Context& ctx) override;
  Tensor backward_impl(const Tensor& dy, nn::Context& ctx) override;

 private:
  // The first layer's input block (cols, in_local) from the depth ranks' shards.
  Tensor gathered_input(const Tensor& shard) const;
  // This rank's W block (in_local, out_local), in the GEMMs' dtype, and b block (out_local),
  // its depth ranks' shards all-gathered (one buffer).
  std::pair<Tensor, Tensor> gathered_parameters() const;
  // dW (in_local, out_local) and db (out_local), partial over depth: summed and scattered
  // back onto this rank's shards' gradients.
  void reduce_scatter_gradients(const Tensor& dw, const Tensor& db);
  void all_reduce(Tensor& t, Axis a) const;
  // out (A.rows, D) = A in, summed over axis a: Â X (over outer) forward, Âᵀ dAGG (over depth)
  // backward. In aggregation_chunks_ ranges of equal row counts, each range's sum started as
  // soon as its SpMM is done so that it runs under the next range's SpMM (Plexus's
  // --block_aggregation --overlap_aggregation). The members of the axis group hold the same
  // rows, so their ranges and collectives match; each value is summed as in the whole sum, up to
  // the reduction's order (bit for bit where the axis holds two ranks).
  void aggregate(const kernels::CsrMatrix& A, const Tensor& in, Tensor& out, Axis a) const;

  const Grid3D& grid_;
  int64_t nodes_;  // N
  int64_t aggregation_chunks_;
  Roles roles_;
  bool first_;
  int64_t shard_rows_ = 0;  // the first layer: rows of its input shard, cols / depth rounded up
  int64_t in_local_, out_local_;  // this rank's widths: in_pad / inner, out_pad / outer
  int64_t shard_;                 // its columns of the W block: out_local / depth
  int64_t in0_, out0_;            // its first input and output feature
  std::vector<int64_t> row_nodes_, col_nodes_;  // the nodes of its output and input rows
  kernels::CsrMatrix block_, block_t_;          // its block of Â (rows x cols) and the transpose
};

// The features as a GCN whose first layer is `first` reads them: a GraphConv3D's shard, else
// the whole.
Tensor model_input_for(const nn::GraphConv& first, const Tensor& features);

}  // namespace loom::parallel::graph3d
