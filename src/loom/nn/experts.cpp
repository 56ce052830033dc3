#include "loom/nn/experts.hpp"

#include "loom/error.hpp"
#include "loom/kernels/gelu.hpp"
#include "loom/kernels/matmul.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/kernels/residual.hpp"
#include "loom/nn/gemm_input.hpp"
#include "loom/nn/saved_activation.hpp"

namespace loom::nn {

using kernels::Trans;
using kernels::Varying;

Experts::Experts(int64_t El, int64_t C, int64_t first, int64_t E) : El_(El), C_(C) {
  fc_w_ = &register_parameter("fc_weight", {El, 4 * C, C}, /*weight_decay=*/true);
  fc_b_ = &register_parameter("fc_bias", {El, 4 * C}, /*weight_decay=*/false);
  proj_w_ = &register_parameter("proj_weight", {El, C, 4 * C}, /*weight_decay=*/true);
  proj_b_ = &register_parameter("proj_bias", {El, C}, /*weight_decay=*/false);
  for (Parameter* w : {fc_w_, proj_w_}) w->set_read_by_gemms(true);  // the biases are added in fp32
  if (El < E) {  // expert parallel: this rank's block of experts
    // Designated: a positional kExpertAxis would land in a field added before `axis` (dim2).
    const ShardSpec spec{.dim = 0, .parts = E / El, .index = first / El, .blocks = 1, .axis = ShardSpec::kExpertAxis};
    for (Parameter* p : {fc_w_, fc_b_, proj_w_, proj_b_}) p->set_shard_spec(spec);
  }
}

Tensor Experts::forward_grouped(const Tensor& x, const std::vector<int64_t>& counts, Context& ctx) {
  const int64_t R = x.size(0), C = C_, H = 4 * C_;
  check(static_cast<int64_t>(counts.size()) == El_, "experts: ", counts.size(), " row counts for ", El_, " experts");
  // Mixed precision keeps bf16 copies, as a dense MLP's layers do (saved_activation.hpp): the
  // rows and the GELU output, which the GEMMs read as their operands in forward and backward,
  // and the pre-activation, which GELU's backward widens, both written by GELU's one pass (the
  // GELU output in bf16 straight from it, as the dense MLP's); h is then fp32 scratch.
  const bool bf16 = saved_in_bf16(ctx);
  const Tensor input = saved_activation(x, ctx);
  Tensor h = Tensor::empty({R, H});                                // (R, 4C) pre-activation
  Tensor a = bf16 ? Tensor() : Tensor::empty({R, H});              // (R, 4C) GELU output, fp32
  Tensor h_kept = bf16 ? Tensor::empty({R, H}, DType::BF16) : h;  // what backward reads of h
  Tensor a_kept = bf16 ? Tensor::empty({R, H}, DType::BF16) : a;  // and of a
  Tensor y = Tensor::empty({R, C});                                // (R, C)
  // The weights as the GEMMs read them: in bf16 each stack converted once a step, not per GEMM.
  const kernels::Operand fc_w = fc_w_->gemm_operand(), proj_w = proj_w_->gemm_operand();
  int64_t r0 = 0;
  for (int64_t e = 0; e < El_; ++e) {
    const int64_t n = counts[static_cast<size_t>(e)];
    if (n == 0) continue;
    project_rows(input, r0 * C, fc_w.at(e * H * C), fc_b_->value().f32() + e * H, h.f32() + r0 * H, n, H, C,
                 ctx.inference(), ctx.packed_weights(), Varying::Rows);
    if (bf16) {
      kernels::gelu_forward(a_kept.bf16() + r0 * H, h_kept.bf16() + r0 * H, h.f32() + r0 * H, n * H);
    } else {
      kernels::gelu_forward(a.f32() + r0 * H, h.f32() + r0 * H, n * H);
    }
    project_rows(a_kept, r0 * H, proj_w.at(e * C * H), proj_b_->value().f32() + e * C, y.f32() + r0 * C, n, C, H,
                 ctx.inference(), ctx.packed_weights(), Varying::Rows);
    r0 += n;
  }
  check(r0 == R, "experts: row counts sum to ", r0, ", got ", R, " rows");
  ctx.save(this, {input, h_kept, a_kept});
  return y;
}

Tensor Experts::backward_grouped(const Tensor& dy, const std::vector<int64_t>& counts, Context& ctx) {
  // fp32, or the bf16 copies of a mixed-precision forward.
  const Tensor &x = ctx.saved(this, 0), &h = ctx.saved(this, 1), &a = ctx.saved(this, 2);
  const int64_t R = x.size(0), C = C_, H = 4 * C_;
  Tensor dx = Tensor::empty({R, C});  // (R, C)
  Tensor dh = Tensor::empty({R, H});  // (R, 4C): da, then dh in place
  // In bf16 every GEMM operand converted once: the weights a step (gemm_operand), dy and each
  // expert's dh here, each read by two GEMMs.
  const kernels::Operand fc_w = fc_w_->gemm_operand(), proj_w = proj_w_->gemm_operand();
  const Tensor dy_c = in_compute_precision(dy);
  int64_t r0 = 0;
  for (int64_t e = 0; e < El_; ++e) {
    const int64_t n = counts[static_cast<size_t>(e)];
    if (n == 0) continue;
    const kernels::Operand dye = gemm_input(dy_c, r0 * C);
    float* dhe = dh.f32() + r0 * H;
    kernels::matmul(dye, Trans::N, proj_w.at(e * C * H), Trans::N, dhe, n, H, C, nullptr, false, Varying::Rows);
    kernels::matmul(dye, Trans::T, gemm_input(a, r0 * H), Trans::N, proj_w_->grad().f32() + e * C * H, C, H, n, nullptr,
                    /*accumulate=*/true, Varying::Inner);
    kernels::bias_backward(proj_b_->grad().f32() + e * C, dy.f32() + r0 * C, n, C);
    if (h.dtype() == DType::BF16)
      kernels::gelu_backward(dhe, h.bf16() + r0 * H, dhe, n * H);
    else
      kernels::gelu_backward(dhe, h.f32() + r0 * H, dhe, n * H);
    const Tensor dh_c = in_compute_precision(dh.narrow(r0, n));  // (n, 4C)
    kernels::matmul(gemm_input(dh_c), Trans::N, fc_w.at(e * H * C), Trans::N, dx.f32() + r0 * C, n, C, H, nullptr,
                    false, Varying::Rows);
    kernels::matmul(gemm_input(dh_c), Trans::T, gemm_input(x, r0 * C), Trans::N, fc_w_->grad().f32() + e * H * C, H, C,
                    n, nullptr, /*accumulate=*/true, Varying::Inner);
    kernels::bias_backward(fc_b_->grad().f32() + e * H, dhe, n, H);
    r0 += n;
  }
  ctx.release(this);
  for (Parameter* p : {proj_w_, proj_b_, fc_w_, fc_b_}) p->grad_contributed();
  return dx;
}

Tensor Experts::forward_impl(const Tensor& x, Context& ctx) {
  check(El_ == 1, "experts: a plain forward needs one expert; use forward_grouped");
  return forward_grouped(x, {x.size(0)}, ctx);
}

Tensor Experts::backward_impl(const Tensor& dy, Context& ctx) { return backward_grouped(dy, {dy.size(0)}, ctx); }

}  // namespace loom::nn
