#include "loom/parallel/tensor_parallel/column_parallel_linear.hpp"

#include "loom/error.hpp"
#include "loom/nn/gemm_input.hpp"
#include "loom/nn/saved_activation.hpp"
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
                                           comm::ProcessGroup& group, bool sequence_parallel, bool gather_output,
                                           bool overlap)
    : nn::Linear(in_features, local_outputs(out_features, blocks, group.size())),
      group_(group),
      sequence_parallel_(sequence_parallel),
      gather_output_(gather_output),
      overlap_(overlap),
      blocks_(blocks) {
  const nn::ShardSpec spec{0, group.size(), group.rank(), blocks};
  weight().set_shard_spec(spec);
  if (bias() != nullptr) bias()->set_shard_spec(spec);
}

Tensor ColumnParallelLinear::forward_impl(const Tensor& x, nn::Context& ctx) {
  // Mixed precision: x in bf16 once (as nn::Linear), this rank's rows of the GEMM input and
  // what backward keeps; under sequence parallelism the gather moves that copy.
  const Tensor input = nn::saved_activation(x, ctx);
  // f forward: the identity, or the gather of the sequence chunks.
  Tensor y = sequence_parallel_ ? gather_and_project(input)
                                : project(input, /*add_bias=*/true, ctx.inference(), ctx.packed_weights());
  ctx.save(this, {input});
  return gather_output_ ? gather_features(y, blocks_, group_) : y;
}

Tensor ColumnParallelLinear::gather_and_project(const Tensor& x) {
  const int t = group_.size();
  if (t == 1) return project(x, /*add_bias=*/true);
  const SequenceGather gathered(x, group_);
  if (!overlap_) gathered.wait();
  const int64_t rows = x.numel() / in_;  // B T/t: one rank's chunk
  Tensor y_blocks = Tensor::empty({t * rows * out_}, DType::F32, MemoryCategory::CommBuffers);  // (t, B, T/t, OC/t)
  const int me = group_.rank();
  project_rows(nn::gemm_input(x), rows, y_blocks.f32() + me * rows * out_, /*add_bias=*/true);  // under the gather
  for (int r = 0; r < t; ++r)
    if (r != me)
      project_rows(nn::gemm_input(gathered.blocks(), r * rows * in_), rows, y_blocks.f32() + r * rows * out_, true);
  return sequence_from_blocks(y_blocks, x.size(0), x.size(1), out_, t);
}

Tensor ColumnParallelLinear::backward_impl(const Tensor& dy_in, nn::Context& ctx) {
  const Tensor& x = ctx.saved(this, 0);  // fp32, or its bf16 copy under mixed precision
  // A gathered output's gradient is whole on every rank: this rank's features are its part.
  const Tensor dy = gather_output_ ? slice_features(dy_in, blocks_, group_) : dy_in;
  // Converted once for both GEMMs, in the pass that sums the bias gradient.
  const Tensor dy_c = bias() != nullptr ? nn::in_compute_precision_adding_bias_grad(dy, bias()->grad().f32(), out_)
                                        : nn::in_compute_precision(dy);
  const int64_t N = dy.numel() / out_;
  Shape shape = dy.shape();
  shape.back() = in_;
  Tensor dx_partial = Tensor::empty(shape, DType::F32);  // (N, C): the whole sequence under SP, partial over the group
  Tensor dx;
  if (sequence_parallel_) {
    const SequenceGather x_full(x, group_);  // for dW: under the dX GEMM
    if (!overlap_) x_full.wait();
    input_gradient_rows(nn::gemm_input(dy_c), N, dx_partial.f32());
    const SequenceReduceScatter dx_sum(dx_partial, group_);  // under the dW GEMM
    if (!overlap_) dx = dx_sum.result();
    add_weight_gradient(nn::gemm_input(dy_c), nn::gemm_input(x_full.whole()), N);
    dx = dx_sum.result();
  } else {
    dx = dx_partial;
    input_gradient_rows(nn::gemm_input(dy_c), N, dx.f32());
    const comm::Work dx_sum = start_f_backward(dx, group_);  // under the dW GEMM
    if (!overlap_) dx_sum.wait();
    add_weight_gradient(nn::gemm_input(dy_c), nn::gemm_input(x), N);
    dx_sum.wait();
  }
  if (bias() != nullptr) bias()->grad_contributed();
  ctx.release(this);
  return dx;
}

}  // namespace loom::parallel::tp
