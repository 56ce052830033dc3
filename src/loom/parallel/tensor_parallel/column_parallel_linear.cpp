#include "loom/parallel/tensor_parallel/column_parallel_linear.hpp"

#include "loom/error.hpp"
#include "loom/parallel/tensor_parallel/mappings.hpp"

namespace loom::parallel::tp {

namespace {
int64_t local_outputs(int64_t out, int64_t blocks, int t) {
  check(blocks >= 1 && out % (blocks * t) == 0, "column-parallel layer: ", out, " output features in ", blocks,
        " block(s) cannot be split over tp = ", t, " ranks");
  return out / t;
}
}  // namespace

ColumnParallelLinear::ColumnParallelLinear(int64_t in_features, int64_t out_features, int64_t blocks,
                                           comm::ProcessGroup& group)
    : nn::Linear(in_features, local_outputs(out_features, blocks, group.size())), group_(group) {
  const nn::ShardSpec spec{0, group.size(), group.rank(), blocks};
  weight().set_shard_spec(spec);
  if (bias() != nullptr) bias()->set_shard_spec(spec);
}

Tensor ColumnParallelLinear::forward_impl(const Tensor& x, nn::Context& ctx) {
  return project(x, ctx, /*add_bias=*/true);  // f forward is the identity
}

Tensor ColumnParallelLinear::backward_impl(const Tensor& dy, nn::Context& ctx) {
  Tensor dx = nn::Linear::backward_impl(dy, ctx);
  f_backward(dx, group_);
  return dx;
}

}  // namespace loom::parallel::tp
