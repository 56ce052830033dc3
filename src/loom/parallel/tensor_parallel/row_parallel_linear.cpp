#include "loom/parallel/tensor_parallel/row_parallel_linear.hpp"

#include "loom/error.hpp"
#include "loom/kernels/residual.hpp"
#include "loom/parallel/tensor_parallel/mappings.hpp"

namespace loom::parallel::tp {

namespace {
int64_t local_inputs(int64_t in, int t) {
  check(in % t == 0, "row-parallel layer: ", in, " input features cannot be split over tp = ", t, " ranks");
  return in / t;
}
}  // namespace

RowParallelLinear::RowParallelLinear(int64_t in_features, int64_t out_features, comm::ProcessGroup& group,
                                     bool sequence_parallel)
    : nn::Linear(local_inputs(in_features, group.size()), out_features),
      group_(group),
      sequence_parallel_(sequence_parallel) {
  weight().set_shard_spec(nn::ShardSpec{1, group.size(), group.rank(), 1});
}

Tensor RowParallelLinear::forward_impl(const Tensor& x, nn::Context& ctx) {
  Tensor y = project(x, /*add_bias=*/false, ctx.inference(), ctx.packed_weights());  // (B, T, OC) partial
  if (sequence_parallel_)
    y = reduce_scatter_sequence(y, group_);  // (B, T/t, OC)
  else
    g_forward(y, group_);
  ctx.save(this, {x});
  if (bias() != nullptr) {
    const float* b = bias()->value().f32();
    float* out = y.f32();
    const int64_t rows = y.numel() / out_;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < out_; ++j) out[i * out_ + j] += b[j];
  }
  return y;
}

Tensor RowParallelLinear::backward_impl(const Tensor& dy, nn::Context& ctx) {
  const Tensor& x = ctx.saved(this, 0);
  Tensor dx;
  if (sequence_parallel_) {
    dx = backward_from(gather_sequence(dy, group_), x, /*bias_grad=*/false);
    if (bias() != nullptr) {  // from this rank's rows only: summed across tp afterwards
      kernels::bias_backward(bias()->grad().f32(), dy.f32(), dy.numel() / out_, out_);
      bias()->grad_contributed();
    }
  } else {
    dx = backward_from(dy, x, true);  // g backward is the identity; dx stays split
  }
  ctx.release(this);
  return dx;
}

}  // namespace loom::parallel::tp
