#include "loom/parallel/tensor_parallel_3d/linear_3d.hpp"

#include <algorithm>
#include <vector>

#include "loom/comm/algorithms.hpp"
#include "loom/error.hpp"
#include "loom/kernels/matmul.hpp"
#include "loom/kernels/residual.hpp"
#include "loom/nn/gemm_input.hpp"
#include "loom/nn/saved_activation.hpp"

namespace loom::parallel::tp3d {

using kernels::Trans;

std::string Linear3D::misfit(int64_t in, int64_t out, int64_t blocks, const Grid3D& grid, Roles roles) {
  return misfit(in, out, blocks, {grid.size(Axis::Row), grid.size(Axis::Col), grid.size(Axis::Depth)}, roles);
}

std::string Linear3D::misfit(int64_t in, int64_t out, int64_t blocks, const std::array<int64_t, 3>& sizes, Roles roles) {
  auto size = [&](Axis a) { return sizes[static_cast<size_t>(a)]; };  // Row, Col, Depth
  const int64_t pi = size(roles.in_axis), po = size(roles.out_axis), D = size(Axis::Depth);
  if (in % pi != 0)
    return std::to_string(in) + " input features do not split over " + axis_name(roles.in_axis) + " " + std::to_string(pi);
  if (out % (blocks * po * D) != 0)
    return std::to_string(out) + " output features" + (blocks > 1 ? " in " + std::to_string(blocks) + " blocks" : "") +
           " do not split over " + axis_name(roles.out_axis) + " " + std::to_string(po) + " x depth " + std::to_string(D);
  return "";
}

namespace {
int64_t checked_in(int64_t in, int64_t out, int64_t blocks, const Grid3D& grid, Roles roles) {
  const std::string why = Linear3D::misfit(in, out, blocks, grid, roles);
  check(why.empty(), "3D-parallel linear layer: ", why);
  return in / grid.size(roles.in_axis);
}
}  // namespace

Linear3D::Linear3D(int64_t in, int64_t out, int64_t blocks, const Grid3D& grid, Roles roles, bool bias,
                   Overlap3D* overlap)
    : nn::Linear(checked_in(in, out, blocks, grid, roles), out / (grid.size(roles.out_axis) * grid.size(Axis::Depth)),
                 /*bias=*/false),
      grid_(grid),
      roles_(roles),
      blocks_(blocks),
      in_local_(in / grid.size(roles.in_axis)),
      out_local_(out / grid.size(roles.out_axis)),
      overlap_(overlap) {
  const int po = grid.size(roles.out_axis), pi = grid.size(roles.in_axis), D = grid.size(Axis::Depth);
  const int ro = grid.rank(roles.out_axis), ri = grid.rank(roles.in_axis), rd = grid.rank(Axis::Depth);
  // Rows: out_axis then depth (depth rank k holds the k-th part of this rank's rows of each
  // block); columns: in_axis. Every grid rank holds a different piece.
  nn::ShardSpec w{0, po * D, ro * D + rd, blocks};
  if (pi > 1) {
    w.dim2 = 1;
    w.parts2 = pi;
    w.index2 = ri;
  }
  weight().set_shard_spec(w);
  if (overlap_ != nullptr) index_ = overlap_->add(weight(), blocks);
  if (bias) {
    bias_ = &register_parameter("bias", {out_local_}, /*weight_decay=*/false);
    bias_->set_shard_spec(nn::ShardSpec{0, po, ro, blocks, -1, 1, 0, /*replica=*/rd * pi + ri});
  }
}

Tensor Linear3D::forward_impl(const Tensor& x_in, nn::Context& ctx) {
  const Tensor x = roles_.slice_input ? grid_.slice_features(x_in, roles_.in_axis) : x_in;  // (N, C/in)
  check(x.ndim() >= 1 && x.size(-1) == in_local_, "Linear3D '", name(), "' expects last dimension ", in_local_,
        ", got shape ", shape_str(x.shape()));
  const int64_t N = x.numel() / in_local_;
  // Mixed precision: x in bf16 once (as nn::Linear), the GEMM's input and what backward keeps.
  const Tensor input = nn::saved_activation(x, ctx);
  const Tensor w = overlap_ ? overlap_->gathered_weight(index_) : grid_.all_gather_depth(weight().gemm_value(), blocks_);
  if (overlap_) overlap_->prefetch_after(index_);  // the next layers' gathers run under this GEMM
  Shape out_shape = x.shape();
  out_shape.back() = out_local_;
  Tensor y = Tensor::empty(out_shape);  // (N, OC/out), partial over in_axis
  // The rows in pieces, each summed over in_axis as soon as its GEMM is done: with overlap the
  // sum of one piece runs under the next piece's GEMM. Both paths cut the same pieces, so the
  // GEMMs and the sums see the same operands either way (bit-identical).
  const int pieces = static_cast<int>(std::min<int64_t>(kOutputPieces, N));
  std::vector<Grid3D::Pending> sums;
  for (int p = 0; p < pieces; ++p) {
    const int64_t r0 = comm::chunk_begin(N, pieces, p), rows = comm::chunk_begin(N, pieces, p + 1) - r0;
    kernels::matmul(nn::gemm_input(input, r0 * in_local_), Trans::N, nn::gemm_input(w), Trans::T,
                    y.f32() + r0 * out_local_, rows, out_local_, in_local_);
    sums.push_back(grid_.start_sum_activations(y.f32() + r0 * out_local_, rows * out_local_, roles_.in_axis));
    if (!overlap_) sums.back().wait();
  }
  for (Grid3D::Pending& sum : sums) sum.wait();
  if (bias_ != nullptr) {
    const float* b = bias_->value().f32();
    float* out = y.f32();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < out_local_; ++j) out[i * out_local_ + j] += b[j];
  }
  ctx.save(this, {input});
  return roles_.gather_output ? grid_.gather_features(y, roles_.out_axis, blocks_) : y;
}

Tensor Linear3D::backward_impl(const Tensor& dy_in, nn::Context& ctx) {
  const Tensor& x = ctx.saved(this, 0);  // (N, C/in), fp32 or its bf16 copy
  const Tensor dy = roles_.gather_output ? grid_.slice_features(dy_in, roles_.out_axis, blocks_) : dy_in;  // (N, OC/out)
  const int64_t N = x.numel() / in_local_;
  // (OC/out, C/in): gathered again, not kept
  const Tensor w = overlap_ ? overlap_->gathered_weight(index_) : grid_.all_gather_depth(weight().gemm_value(), blocks_);
  if (overlap_) {
    overlap_->prefetch_before(index_);  // the previous layers', for their backward
    overlap_->drop_after(index_);       // a recomputed forward's prefetch of a layer already done
  }
  Tensor dx = Tensor::empty(x.shape(), DType::F32);  // (N, C/in), partial over out_axis
  // Converted once for both GEMMs, in the pass that sums the bias gradient.
  const Tensor dy_c = bias_ != nullptr ? nn::in_compute_precision_adding_bias_grad(dy, bias_->grad().f32(), out_local_)
                                       : nn::in_compute_precision(dy);
  kernels::matmul(nn::gemm_input(dy_c), Trans::N, nn::gemm_input(w), Trans::N, dx.f32(), N, in_local_, out_local_);
  Grid3D::Pending dx_sum = grid_.start_sum_activations(dx, roles_.out_axis);
  if (!overlap_) dx_sum.wait();
  // With overlap, a whole input's gradient is gathered over in_axis right behind the sum over
  // out_axis, both under the dW GEMM: a peer's part is ready once its dx GEMM is, so the
  // gather no longer waits for the peers' dW GEMMs as a blocking gather after them would.
  Grid3D::Pending dx_whole;
  if (overlap_ && roles_.slice_input) dx_whole = grid_.start_gather_features_after(dx_sum, dx, roles_.in_axis);
  Tensor dw = Tensor::empty({out_local_, in_local_}, DType::F32, MemoryCategory::CommBuffers);  // this batch's block gradient
  kernels::matmul(nn::gemm_input(dy_c), Trans::T, nn::gemm_input(x), Trans::N, dw.f32(), out_local_, in_local_, N);
  dx_sum.wait();
  if (overlap_) {
    overlap_->defer_gradient(grid_.start_reduce_scatter_depth(dw, blocks_), weight());
  } else {
    const Tensor dshard = grid_.reduce_scatter_depth(dw, blocks_);  // (OC/(out D), C/in)
    kernels::add_inplace(weight().grad().f32(), dshard.f32(), dshard.numel());
    weight().grad_contributed();
  }
  if (bias_ != nullptr) bias_->grad_contributed();
  if (overlap_ && index_ == 0) overlap_->finish_gradients();  // the last 3D layer of backward
  ctx.release(this);
  if (!roles_.slice_input) return dx;
  return dx_whole.active() ? dx_whole.wait() : grid_.gather_features(dx, roles_.in_axis);
}

}  // namespace loom::parallel::tp3d
