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
                                           comm::ProcessGroup& group, bool sequence_parallel, bool gather_output)
    : nn::Linear(in_features, local_outputs(out_features, blocks, group.size())),
      group_(group),
      sequence_parallel_(sequence_parallel),
      gather_output_(gather_output),
      blocks_(blocks) {
  const nn::ShardSpec spec{0, group.size(), group.rank(), blocks};
  weight().set_shard_spec(spec);
  if (bias() != nullptr) bias()->set_shard_spec(spec);
}

Tensor ColumnParallelLinear::forward_impl(const Tensor& x, nn::Context& ctx) {
  // f forward: the identity, or the gather of the sequence chunks.
  Tensor y = project(sequence_parallel_ ? gather_sequence(x, group_) : x, /*add_bias=*/true, ctx.inference(),
                     ctx.packed_weights());
  ctx.save(this, {x});
  return gather_output_ ? gather_features(y, blocks_, group_) : y;
}

Tensor ColumnParallelLinear::backward_impl(const Tensor& dy_in, nn::Context& ctx) {
  const Tensor& x = ctx.saved(this, 0);
  // A gathered output's gradient is whole on every rank: this rank's features are its part.
  const Tensor dy = gather_output_ ? slice_features(dy_in, blocks_, group_) : dy_in;
  Tensor dx;
  if (sequence_parallel_) {
    dx = reduce_scatter_sequence(backward_from(dy, gather_sequence(x, group_), true), group_);
  } else {
    dx = backward_from(dy, x, true);
    f_backward(dx, group_);
  }
  ctx.release(this);
  return dx;
}

}  // namespace loom::parallel::tp
