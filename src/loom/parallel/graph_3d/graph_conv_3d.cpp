#include "loom/parallel/graph_3d/graph_conv_3d.hpp"

#include <algorithm>
#include <cstring>

#include "loom/error.hpp"
#include "loom/kernels/matmul.hpp"
#include "loom/kernels/residual.hpp"
#include "loom/kernels/spmm.hpp"
#include "loom/nn/gemm_input.hpp"
#include "loom/nn/saved_activation.hpp"
#include "loom/parallel/graph_3d/local_adjacency.hpp"

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

LocalWidths LocalWidths::of(int64_t in, int64_t out, int64_t layer, const Grid3D& grid) {
  return of(in, out, layer, {grid.size(Axis::Row), grid.size(Axis::Col), grid.size(Axis::Depth)});
}

LocalWidths LocalWidths::of(int64_t in, int64_t out, int64_t layer, const std::array<int64_t, 3>& sizes) {
  const Roles r = Roles::of(layer);
  const auto size = [&](Axis a) { return sizes[static_cast<size_t>(a)]; };
  const int64_t Go = size(r.outer), Gi = size(r.inner), Gd = size(r.depth);
  // A hidden layer's input is the previous layer's output, padded to that layer's outer x
  // depth, which are this layer's inner x outer.
  const int64_t in_pad = layer == 0 ? padded(in, Gi) : padded(in, Gi * Go), out_pad = padded(out, Go * Gd);
  return {.in = in_pad / Gi, .out = out_pad / Go, .shard = out_pad / (Go * Gd)};
}

GraphConv3D::GraphConv3D(int64_t in, int64_t out, int64_t layer, int64_t nodes, kernels::CsrMatrix block,
                         bool input_gradient, const Grid3D& grid, const NodeOrders& orders,
                         int64_t aggregation_chunks)
    : nn::GraphConv(in, out, nullptr, input_gradient,  // Â only as this block
                    {LocalWidths::of(in, out, layer, grid).in, LocalWidths::of(in, out, layer, grid).shard},
                    LocalWidths::of(in, out, layer, grid).shard),
      grid_(grid),
      nodes_(nodes),
      aggregation_chunks_(aggregation_chunks),
      roles_(Roles::of(layer)),
      first_(layer == 0) {
  const int64_t Go = grid.size(roles_.outer), Gi = grid.size(roles_.inner), Gd = grid.size(roles_.depth);
  const int64_t ro = grid.rank(roles_.outer), ri = grid.rank(roles_.inner), rd = grid.rank(roles_.depth);
  const LocalWidths w = LocalWidths::of(in, out, layer, grid);
  in_local_ = w.in;
  out_local_ = w.out;
  shard_ = w.shard;
  in0_ = ri * in_local_;
  out0_ = ro * out_local_;
  row_nodes_ = nodes_at(orders.rows_of(layer), part_range(nodes, Gd, rd));
  col_nodes_ = nodes_at(orders.columns_of(layer), part_range(nodes, Go, ro));
  block_ = std::move(block);
  check(block_.rows == static_cast<int64_t>(row_nodes_.size()) && block_.cols == static_cast<int64_t>(col_nodes_.size()),
        "GraphConv3D '", name(), "': a block of ", block_.rows, " x ", block_.cols, " for ", row_nodes_.size(), " x ",
        col_nodes_.size(), " nodes");
  block_t_ = kernels::csr_transpose(block_);
  if (first_) shard_rows_ = padded(block_.cols, Gd) / Gd;
  // W: rows over inner, columns over outer x depth (every rank a different piece); b: over
  // outer x depth, the same on every inner rank.
  // Padded widths are zeros the serial tensors do not have: a checkpoint leaves them out.
  const int64_t in_pad = in_local_ * Gi - in, out_pad = shard_ * Go * Gd - out;
  weight_->set_shard_spec(nn::ShardSpec{.dim = 0, .parts = Gi, .index = ri, .dim2 = 1, .parts2 = Go * Gd,
                                        .index2 = ro * Gd + rd, .pad = in_pad, .pad2 = out_pad});
  bias_->set_shard_spec(nn::ShardSpec{.dim = 0, .parts = Go * Gd, .index = ro * Gd + rd, .replica = ri, .pad = out_pad});
}

void GraphConv3D::all_reduce(Tensor& t, Axis a) const {
  // Every member of an axis group holds the same shape, so an empty block skips on all of them.
  // These are activations and their gradients: in the group's activation dtype (bf16 in a bf16 run).
  if (t.numel() > 0) grid_.sum_activations(t, a);
}

void GraphConv3D::aggregate(const kernels::CsrMatrix& A, const Tensor& in, Tensor& out, Axis a) const {
  const int64_t D = in.size(1), chunks = std::min(aggregation_chunks_, A.rows);
  if (chunks <= 1) {
    kernels::spmm(A, in.f32(), out.f32(), D);
    all_reduce(out, a);
    return;
  }
  std::vector<Grid3D::Pending> sums;
  try {
    for (int64_t c = 0; c < chunks; ++c) {
      const auto [r0, r1] = part_range(A.rows, chunks, c);
      kernels::spmm_rows(A, in.f32(), out.f32(), D, r0, r1);
      if (r1 > r0 && D > 0) sums.push_back(grid_.start_sum_activations(out.f32() + r0 * D, (r1 - r0) * D, a));
    }
  } catch (...) {
    for (Grid3D::Pending& sum : sums) sum.wait();  // no collective left writing into out
    throw;
  }
  for (Grid3D::Pending& sum : sums) sum.wait();
}

nn::GraphConv::OutputBlock GraphConv3D::output_block() const {
  return {.nodes = &row_nodes_, .col0 = out0_};
}

void GraphConv3D::set_weight(const Tensor& whole) {
  check(whole.shape() == Shape{in_, out_}, "GraphConv3D '", name(), "': a weight of (", in_, ", ", out_, ") expected");
  float* w = weight_->value().f32();
  const int64_t col0 = out0_ + grid_.rank(roles_.depth) * shard_;
  for (int64_t i = 0; i < in_local_; ++i)
    for (int64_t j = 0; j < shard_; ++j) {
      const int64_t r = in0_ + i, c = col0 + j;
      w[i * shard_ + j] = r < in_ && c < out_ ? whole.f32()[r * out_ + c] : 0.0f;
    }
}

double GraphConv3D::weight_sum_squares() {
  Tensor s = Tensor::empty({1}, DType::F32, MemoryCategory::Other);
  s.f32()[0] = static_cast<float>(kernels::sum_squares(weight_->value().f32(), weight_->numel()));
  for (const Axis a : {roles_.outer, roles_.inner, roles_.depth}) grid_.all_reduce(s, a);  // every piece differs
  return s.f32()[0];
}

std::pair<Tensor, Tensor> GraphConv3D::gathered_parameters() const {
  const int D = grid_.size(roles_.depth);
  const Tensor& w_shard = weight_->gemm_value();  // (in_local, shard): fp32, or its bf16 copy (made once a step)
  if (D == 1) return {w_shard, bias_->value()};
  // Each depth rank's piece: its W columns in the GEMMs' dtype, then its b columns in fp32 (the
  // bias is added in fp32). A bf16 piece travels as 16-bit words, b's fp32 bits as pairs of
  // them: exact, since a gather adds nothing.
  const DType dt = w_shard.dtype();
  const auto esize = static_cast<int64_t>(dtype_size(dt));
  const int64_t w_bytes = in_local_ * shard_ * esize, piece = (w_bytes + 4 * shard_) / esize;  // in elements
  Tensor mine = Tensor::empty({piece}, dt, MemoryCategory::CommBuffers);
  auto* my_bytes = static_cast<char*>(mine.raw());
  std::memcpy(my_bytes, w_shard.raw(), static_cast<size_t>(w_bytes));
  std::memcpy(my_bytes + w_bytes, bias_->value().f32(), sizeof(float) * static_cast<size_t>(shard_));
  Tensor all = Tensor::empty({D * piece}, dt, MemoryCategory::CommBuffers);
  comm::ProcessGroup& depth = grid_.group(roles_.depth);
  if (dt == DType::BF16)
    depth.all_gather_bf16_async(mine.bf16(), all.bf16(), piece).wait();
  else
    depth.all_gather(mine, all);
  Tensor w = Tensor::empty({in_local_, out_local_}, dt, MemoryCategory::CommBuffers);
  Tensor b = Tensor::empty({out_local_}, DType::F32, MemoryCategory::CommBuffers);
  const int64_t row_bytes = shard_ * esize;
  for (int d = 0; d < D; ++d) {
    const char* src = static_cast<const char*>(all.raw()) + d * piece * esize;
    char* w_bytes_out = static_cast<char*>(w.raw());
    for (int64_t i = 0; i < in_local_; ++i)
      std::memcpy(w_bytes_out + (i * out_local_ + d * shard_) * esize, src + i * row_bytes, static_cast<size_t>(row_bytes));
    std::memcpy(b.f32() + d * shard_, src + w_bytes, sizeof(float) * static_cast<size_t>(shard_));
  }
  return {w, b};
}

void GraphConv3D::reduce_scatter_gradients(const Tensor& dw, const Tensor& db) {
  const int D = grid_.size(roles_.depth);
  if (D == 1) {  // the shard is the block
    kernels::add_inplace(weight_->grad().f32(), dw.f32(), dw.numel());
    kernels::add_inplace(bias_->grad().f32(), db.f32(), db.numel());
    return;
  }
  // Depth rank d's part at d, laid out as gathered_parameters() reads it.
  const int64_t piece = (in_local_ + 1) * shard_;
  Tensor all = Tensor::empty({D * piece}, DType::F32, MemoryCategory::CommBuffers);
  for (int d = 0; d < D; ++d) {
    float* dst = all.f32() + d * piece;
    for (int64_t i = 0; i < in_local_; ++i) std::copy_n(dw.f32() + i * out_local_ + d * shard_, shard_, dst + i * shard_);
    std::copy_n(db.f32() + d * shard_, shard_, dst + in_local_ * shard_);
  }
  Tensor mine = Tensor::empty({piece}, DType::F32, MemoryCategory::CommBuffers);
  grid_.group(roles_.depth).reduce_scatter(all, mine, comm::ReduceOp::Sum);
  kernels::add_inplace(weight_->grad().f32(), mine.f32(), in_local_ * shard_);
  kernels::add_inplace(bias_->grad().f32(), mine.f32() + in_local_ * shard_, shard_);
}

int64_t GraphConv3D::block_bytes() const { return csr_bytes(block_) + csr_bytes(block_t_); }

int64_t GraphConv3D::node_list_bytes() const {
  return static_cast<int64_t>((row_nodes_.capacity() + col_nodes_.capacity()) * sizeof(int64_t));
}

Tensor GraphConv3D::input_shard(const Tensor& whole) const {
  check(whole.ndim() == 2 && whole.size(0) == nodes_ && whole.size(1) == in_, "GraphConv3D '", name(),
        "' shards (", nodes_, ", ", in_, ") features, got ", shape_str(whole.shape()));
  return input_shard([&](const std::function<bool(int64_t)>& wanted, const std::function<void(int64_t, const float*)>& keep) {
    for (int64_t i = 0; i < nodes_; ++i)
      if (wanted(i)) keep(i, whole.f32() + i * in_);
  });
}

Tensor GraphConv3D::input_shard(const RowStream& rows) const {
  check(first_, "GraphConv3D '", name(), "': only the first layer reads the features");
  Tensor shard = Tensor::zeros({shard_rows_, in_local_}, DType::F32, MemoryCategory::Other);
  // Its rows are its block's input rows first_row .. first_row + count - 1, whose nodes its
  // input list holds; looked up by node through a copy sorted by node (count long, not N).
  const int64_t first_row = grid_.rank(roles_.depth) * shard_rows_;
  const int64_t count = std::clamp<int64_t>(block_.cols - first_row, 0, shard_rows_);
  const int64_t n = std::clamp<int64_t>(in_ - in0_, 0, in_local_);  // past `in`: padding
  std::vector<std::pair<int64_t, int64_t>> row_of_node;  // (node, row)
  row_of_node.reserve(static_cast<size_t>(count));
  for (int64_t r = 0; r < count; ++r) row_of_node.emplace_back(col_nodes_[static_cast<size_t>(first_row + r)], r);
  std::sort(row_of_node.begin(), row_of_node.end());
  const auto row_of = [&](int64_t node) {
    const auto it = std::lower_bound(row_of_node.begin(), row_of_node.end(), std::pair<int64_t, int64_t>{node, -1});
    return it != row_of_node.end() && it->first == node ? it->second : int64_t{-1};
  };
  rows([&](int64_t node) { return row_of(node) >= 0; },
       [&](int64_t node, const float* values) { std::copy_n(values + in0_, n, shard.f32() + row_of(node) * in_local_); });
  return shard;
}

Tensor GraphConv3D::gathered_input(const Tensor& shard) const {
  check(shard.ndim() == 2 && shard.size(0) == shard_rows_ && shard.size(1) == in_local_, "GraphConv3D '", name(),
        "' expects its (", shard_rows_, ", ", in_local_, ") shard of the features (input_shard()), got ",
        shape_str(shard.shape()));
  const int D = grid_.size(roles_.depth);
  if (D == 1 || shard.numel() == 0) return shard;  // (the depth ranks share the block's columns)
  Tensor all = Tensor::empty({D * shard_rows_, in_local_});  // the depth ranks' rows in order, then padding
  grid_.group(roles_.depth).all_gather(shard, all);
  return all.narrow(0, block_.cols);
}

Tensor GraphConv3D::forward_impl(const Tensor& x_in, nn::Context& ctx) {
  const int64_t rows = block_.rows, cols = block_.cols;
  const Tensor x = first_ ? gathered_input(x_in) : x_in;  // (cols, in/inner)
  check(x.ndim() == 2 && x.size(0) == cols && x.size(1) == in_local_, "GraphConv3D '", name(), "' expects (", cols, ", ",
        in_local_, ") node features, got ", shape_str(x.shape()));
  Tensor agg = Tensor::empty({rows, in_local_});  // (rows, in/inner): Â X, summed over outer's columns
  aggregate(block_, x, agg, roles_.outer);
  const auto [w, bias] = gathered_parameters();
  const Tensor input = nn::saved_activation(agg, ctx);  // in bf16 once under mixed precision
  Tensor y = Tensor::zeros({rows, out_local_});  // (rows, out/outer)
  if (rows > 0)
    kernels::matmul(nn::gemm_input(input), Trans::N, nn::gemm_input(w), Trans::N, y.f32(), rows, out_local_, in_local_);
  all_reduce(y, roles_.inner);
  const float* b = bias.f32();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < out_local_; ++j) y.f32()[r * out_local_ + j] += b[j];
  ctx.save(this, {input});
  return y;
}

Tensor GraphConv3D::backward_impl(const Tensor& dy, nn::Context& ctx) {
  const int64_t rows = block_.rows, cols = block_.cols;
  const Tensor agg = ctx.saved(this, 0);
  check(dy.ndim() == 2 && dy.size(0) == rows && dy.size(1) == out_local_, "GraphConv3D '", name(), "' expects a (", rows,
        ", ", out_local_, ") output gradient, got ", shape_str(dy.shape()));
  // dW and db: partial over the depth ranks' rows.
  Tensor dw = Tensor::zeros({in_local_, out_local_}), db = Tensor::zeros({out_local_});
  // Converted once for both GEMMs, in the pass that sums db.
  const Tensor dy_c = nn::in_compute_precision_adding_bias_grad(dy, db.f32(), out_local_);
  if (rows > 0)
    kernels::matmul(nn::gemm_input(agg), Trans::T, nn::gemm_input(dy_c), Trans::N, dw.f32(), in_local_, out_local_, rows);
  reduce_scatter_gradients(dw, db);
  Tensor dx;
  if (input_gradient_) {
    const Tensor w = gathered_parameters().first;  // gathered again, not kept since forward
    Tensor dagg = Tensor::zeros({rows, in_local_});  // (rows, in/inner): partial over outer
    if (rows > 0)
      kernels::matmul(nn::gemm_input(dy_c), Trans::N, nn::gemm_input(w), Trans::T, dagg.f32(), rows, in_local_, out_local_);
    all_reduce(dagg, roles_.outer);
    dx = Tensor::empty({cols, in_local_});  // (cols, in/inner): Âᵀ dAGG, summed over depth's rows
    aggregate(block_t_, dagg, dx, roles_.depth);
  }
  weight_->grad_contributed();
  bias_->grad_contributed();
  ctx.release(this);
  return dx;
}

Tensor model_input_for(const nn::GraphConv& first, const Tensor& features) {
  const auto* conv = dynamic_cast<const GraphConv3D*>(&first);
  return conv != nullptr ? conv->input_shard(features) : features;
}

}  // namespace loom::parallel::graph3d
