#include "loom/parallel/tensor_parallel_3d/serial_linear_3d.hpp"

#include "loom/nn/saved_activation.hpp"

namespace loom::parallel::tp3d {

SerialLinear3D::SerialLinear3D(int64_t in, int64_t out, int64_t blocks, const Grid3D& grid, Axis axis,
                               bool gather_input, bool slice_output)
    : nn::Linear(in, out), grid_(grid), axis_(axis), blocks_(blocks), gather_input_(gather_input), slice_output_(slice_output) {}

Tensor SerialLinear3D::forward_impl(const Tensor& x_in, nn::Context& ctx) {
  // Gathered in fp32: a bf16 input (the MLP hands its projection GELU's bf16 output) is widened first.
  const Tensor x = gather_input_ ? grid_.gather_features(nn::widened(x_in), axis_) : x_in;  // (N, C)
  const Tensor input = nn::saved_activation(x, ctx);  // in bf16 once under mixed precision, as nn::Linear
  Tensor y = project(input, /*add_bias=*/true);       // (N, OC)
  ctx.save(this, {input});
  return slice_output_ ? grid_.slice_features(y, axis_, blocks_) : y;
}

Tensor SerialLinear3D::backward_impl(const Tensor& dy_in, nn::Context& ctx) {
  const Tensor dy = slice_output_ ? grid_.gather_features(dy_in, axis_, blocks_) : dy_in;  // (N, OC)
  Tensor dx = backward_from(dy, ctx.saved(this, 0), /*bias_grad=*/true);                    // (N, C)
  ctx.release(this);
  return gather_input_ ? grid_.slice_features(dx, axis_) : dx;
}

}  // namespace loom::parallel::tp3d
