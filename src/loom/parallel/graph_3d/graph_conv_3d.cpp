#include "loom/parallel/graph_3d/graph_conv_3d.hpp"

#include <algorithm>

#include "loom/error.hpp"
#include "loom/kernels/matmul.hpp"
#include "loom/kernels/residual.hpp"
#include "loom/kernels/spmm.hpp"

namespace loom::parallel::graph3d {

using kernels::Trans;

Roles Roles::of(int64_t layer) {
  switch (layer % 3) {
    case 0: return {Axis::Row, Axis::Col, Axis::Depth};
    case 1: return {Axis::Depth, Axis::Row, Axis::Col};
    default: return {Axis::Col, Axis::Depth, Axis::Row};
  }
}

namespace {
// A range of positions in an order -> the nodes there.
std::vector<int64_t> nodes_at(const std::vector<int64_t>& order, std::pair<int64_t, int64_t> range) {
  return {order.begin() + range.first, order.begin() + range.second};
}
}  // namespace

GraphConv3D::GraphConv3D(int64_t in, int64_t out, int64_t layer, bool last, std::shared_ptr<const nn::GraphOperator> graph,
                         bool input_gradient, const Grid3D& grid, std::shared_ptr<const NodeOrders> orders)
    : nn::GraphConv(in, out, graph, input_gradient,
                    {padded(in, grid.size(Roles::of(layer).inner)) / grid.size(Roles::of(layer).inner),
                     padded(out, grid.size(Roles::of(layer).outer)) / grid.size(Roles::of(layer).outer)},
                    padded(out, grid.size(Roles::of(layer).outer)) / grid.size(Roles::of(layer).outer)),
      grid_(grid),
      roles_(Roles::of(layer)),
      first_(layer == 0),
      last_(last),
      orders_(std::move(orders)) {
  const int64_t Go = grid.size(roles_.outer), Gi = grid.size(roles_.inner), Gd = grid.size(roles_.depth);
  const int64_t ro = grid.rank(roles_.outer), ri = grid.rank(roles_.inner), rd = grid.rank(roles_.depth);
  in_local_ = padded(in, Gi) / Gi;
  out_local_ = padded(out, Go) / Go;
  in0_ = ri * in_local_;
  out0_ = ro * out_local_;
  const kernels::CsrMatrix& A = graph->adjacency;
  const int64_t N = A.rows;
  row_nodes_ = nodes_at(orders_->rows_of(layer), part_range(N, Gd, rd));
  const std::pair<int64_t, int64_t> cols = part_range(N, Go, ro);
  col_nodes_ = nodes_at(orders_->columns_of(layer), cols);
  block_ = adjacency_block(A, row_nodes_, orders_->column_positions_of(layer), cols.first, cols.second);
  block_t_ = kernels::csr_transpose(block_);
  // W: rows over inner, columns over outer, whole on each depth rank; b: over outer.
  weight_->set_shard_spec(
      nn::ShardSpec{.dim = 0, .parts = Gi, .index = ri, .dim2 = 1, .parts2 = Go, .index2 = ro, .replica = rd});
  bias_->set_shard_spec(nn::ShardSpec{.dim = 0, .parts = Go, .index = ro, .replica = rd * Gi + ri});
}

void GraphConv3D::all_reduce(Tensor& t, Axis a) const {
  // Every member of an axis group holds the same shape, so an empty block skips on all of them.
  if (t.numel() > 0) grid_.all_reduce(t, a);
}

nn::GraphConv::OutputBlock GraphConv3D::output_block() const {
  return last_ ? OutputBlock{} : OutputBlock{.nodes = &row_nodes_, .col0 = out0_};
}

void GraphConv3D::set_weight(const Tensor& whole) {
  check(whole.shape() == Shape{in_, out_}, "GraphConv3D '", name(), "': a weight of (", in_, ", ", out_, ") expected");
  float* w = weight_->value().f32();
  for (int64_t i = 0; i < in_local_; ++i)
    for (int64_t j = 0; j < out_local_; ++j) {
      const int64_t r = in0_ + i, c = out0_ + j;
      w[i * out_local_ + j] = r < in_ && c < out_ ? whole.f32()[r * out_ + c] : 0.0f;
    }
}

double GraphConv3D::weight_sum_squares() {
  Tensor s = Tensor::empty({1}, DType::F32, MemoryCategory::Other);
  s.f32()[0] = static_cast<float>(kernels::sum_squares(weight_->value().f32(), weight_->numel()));
  grid_.all_reduce(s, roles_.outer);  // the depth ranks hold the same blocks: not over depth
  grid_.all_reduce(s, roles_.inner);
  return s.f32()[0];
}

Tensor GraphConv3D::gather_block(const Tensor& whole, const std::vector<int64_t>& nodes, int64_t col0, int64_t cols) {
  const int64_t width = whole.size(1);
  Tensor b = Tensor::zeros({static_cast<int64_t>(nodes.size()), cols});
  const int64_t n = std::clamp<int64_t>(width - col0, 0, cols);
  for (size_t r = 0; r < nodes.size(); ++r)
    std::copy_n(whole.f32() + nodes[r] * width + col0, n, b.f32() + static_cast<int64_t>(r) * cols);
  return b;
}

Tensor GraphConv3D::whole_output(const Tensor& y) const {
  const int64_t N = graph_->adjacency.rows;
  Tensor whole = Tensor::zeros({N, out_});
  const int64_t n = std::clamp<int64_t>(out_ - out0_, 0, out_local_);
  for (size_t r = 0; r < row_nodes_.size(); ++r)
    std::copy_n(y.f32() + static_cast<int64_t>(r) * out_local_, n, whole.f32() + row_nodes_[r] * out_ + out0_);
  all_reduce(whole, roles_.depth);  // each (depth, outer) block once; inner ranks hold copies
  all_reduce(whole, roles_.outer);
  return whole;
}

Tensor GraphConv3D::forward_impl(const Tensor& x_in, nn::Context& ctx) {
  const int64_t rows = block_.rows, cols = block_.cols;
  const Tensor x = first_ ? gather_block(x_in, col_nodes_, in0_, in_local_) : x_in;  // (cols, in/inner)
  check(x.ndim() == 2 && x.size(0) == cols && x.size(1) == in_local_, "GraphConv3D '", name(), "' expects (", cols, ", ",
        in_local_, ") node features, got ", shape_str(x.shape()));
  Tensor agg = Tensor::empty({rows, in_local_});  // (rows, in/inner): Â X over this rank's columns
  kernels::spmm(block_, x.f32(), agg.f32(), in_local_);
  all_reduce(agg, roles_.outer);
  Tensor y = Tensor::zeros({rows, out_local_});  // (rows, out/outer)
  if (rows > 0)
    kernels::matmul(agg.f32(), Trans::N, weight_->value().f32(), Trans::N, y.f32(), rows, out_local_, in_local_);
  all_reduce(y, roles_.inner);
  const float* b = bias_->value().f32();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < out_local_; ++j) y.f32()[r * out_local_ + j] += b[j];
  ctx.save(this, {agg});
  return last_ ? whole_output(y) : y;
}

Tensor GraphConv3D::backward_impl(const Tensor& dy_in, nn::Context& ctx) {
  const int64_t rows = block_.rows, cols = block_.cols;
  const Tensor agg = ctx.saved(this, 0);
  const Tensor dy = last_ ? gather_block(dy_in, row_nodes_, out0_, out_local_) : dy_in;  // (rows, out/outer)
  // dW and db in one buffer: partial over the depth ranks' rows.
  Tensor dparams = Tensor::zeros({in_local_ * out_local_ + out_local_});
  if (rows > 0) {
    kernels::matmul(agg.f32(), Trans::T, dy.f32(), Trans::N, dparams.f32(), in_local_, out_local_, rows);
    kernels::bias_backward(dparams.f32() + in_local_ * out_local_, dy.f32(), rows, out_local_);
  }
  all_reduce(dparams, roles_.depth);
  float* dw = weight_->grad().f32();
  for (int64_t i = 0; i < in_local_ * out_local_; ++i) dw[i] += dparams.f32()[i];
  float* db = bias_->grad().f32();
  for (int64_t j = 0; j < out_local_; ++j) db[j] += dparams.f32()[in_local_ * out_local_ + j];
  Tensor dx;
  if (input_gradient_) {
    Tensor dagg = Tensor::zeros({rows, in_local_});  // (rows, in/inner): partial over outer
    if (rows > 0)
      kernels::matmul(dy.f32(), Trans::N, weight_->value().f32(), Trans::T, dagg.f32(), rows, in_local_, out_local_);
    all_reduce(dagg, roles_.outer);
    dx = Tensor::empty({cols, in_local_});  // (cols, in/inner): partial over depth
    kernels::spmm(block_t_, dagg.f32(), dx.f32(), in_local_);
    all_reduce(dx, roles_.depth);
  }
  weight_->grad_contributed();
  bias_->grad_contributed();
  ctx.release(this);
  return dx;
}

}  // namespace loom::parallel::graph3d
