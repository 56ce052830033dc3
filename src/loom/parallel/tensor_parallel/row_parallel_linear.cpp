#include "loom/parallel/tensor_parallel/row_parallel_linear.hpp"

#include "loom/error.hpp"
#include "loom/parallel/tensor_parallel/mappings.hpp"

namespace loom::parallel::tp {

namespace {
int64_t local_inputs(int64_t in, int t) {
  check(in % t == 0, "row-parallel layer: ", in, " input features cannot be split over tp = ", t, " ranks");
  return in / t;
}
}  // namespace

RowParallelLinear::RowParallelLinear(int64_t in_features, int64_t out_features, comm::ProcessGroup& group)
    : nn::Linear(local_inputs(in_features, group.size()), out_features), group_(group) {
  weight().set_shard_spec(nn::ShardSpec{1, group.size(), group.rank(), 1});
}

Tensor RowParallelLinear::forward_impl(const Tensor& x, nn::Context& ctx) {
  Tensor y = project(x, ctx, /*add_bias=*/false);  // (N, OC) partial
  g_forward(y, group_);
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
  return nn::Linear::backward_impl(dy, ctx);  // g backward is the identity; dx stays split
}

}  // namespace loom::parallel::tp
