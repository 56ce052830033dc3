#include "loom/parallel/tensor_parallel/row_parallel_linear.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "loom/error.hpp"
#include "loom/nn/gemm_input.hpp"
#include "loom/nn/saved_activation.hpp"
#include "loom/parallel/tensor_parallel/mappings.hpp"

namespace loom::parallel::tp {

namespace {
int64_t local_inputs(int64_t in, int t) {
  check(in % t == 0, "row-parallel layer: ", in, " input features cannot be split over tp = ", t, " ranks");
  return in / t;
}

// Rows [q0, q1) of every rank's chunk of x (B, T, K), rank-major: (t, q1 - q0, K), where row
// q of a chunk is token q mod T/t of sequence q div T/t.
Tensor chunk_rows(const Tensor& x, int64_t q0, int64_t q1, int t) {
  const int64_t T = x.size(1), Tl = T / t, K = x.size(2), n = q1 - q0;
  const size_t row_bytes = static_cast<size_t>(K) * dtype_size(x.dtype());
  Tensor rows = Tensor::empty({t, n, K}, x.dtype(), MemoryCategory::CommBuffers);
  const auto* src = static_cast<const char*>(x.raw());
  auto* dst = static_cast<char*>(rows.raw());
  for (int r = 0; r < t; ++r)
    for (int64_t q = q0; q < q1;) {
      const int64_t b = q / Tl, i = q % Tl, run = std::min(q1 - q, Tl - i);  // to the end of sequence b's chunk
      std::memcpy(dst + static_cast<size_t>(r * n + q - q0) * row_bytes,
                  src + static_cast<size_t>(b * T + r * Tl + i) * row_bytes, static_cast<size_t>(run) * row_bytes);
      q += run;
    }
  return rows;
}
}  // namespace

RowParallelLinear::RowParallelLinear(int64_t in_features, int64_t out_features, comm::ProcessGroup& group,
                                     bool sequence_parallel, bool overlap)
    : nn::Linear(local_inputs(in_features, group.size()), out_features),
      group_(group),
      sequence_parallel_(sequence_parallel),
      overlap_(overlap) {
  weight().set_shard_spec(nn::ShardSpec{1, group.size(), group.rank(), 1});
}

Tensor RowParallelLinear::forward_impl(const Tensor& x, nn::Context& ctx) {
  // Mixed precision: x in bf16 once (as nn::Linear), the GEMM's input and what backward keeps.
  const Tensor input = nn::saved_activation(x, ctx);
  Tensor y;
  if (sequence_parallel_ && group_.size() > 1) {
    y = project_and_reduce_scatter(input);  // (B, T/t, OC)
  } else {
    y = project(input, /*add_bias=*/false, ctx.inference(), ctx.packed_weights());  // (B, T, OC) partial
    g_forward(y, group_);
  }
  ctx.save(this, {input});
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

Tensor RowParallelLinear::project_and_reduce_scatter(const Tensor& x) {
  const int t = group_.size();
  check(x.ndim() == 3 && x.size(1) % t == 0 && x.size(2) == in_, "sequence parallelism: the sequence length (",
        x.ndim() == 3 ? x.size(1) : -1, ") must be divisible by tp (", t, ")");
  const int64_t rows = x.numel() / in_ / t;  // B T/t: this rank's chunk of the output
  Tensor y = Tensor::empty({x.size(0), x.size(1) / t, out_});
  const int64_t pieces = std::min(kPieces, rows);
  std::vector<std::pair<comm::Work, Tensor>> in_flight;  // each piece's reduce-scatter and its buffer
  for (int64_t j = 0; j < pieces; ++j) {
    const int64_t q0 = rows * j / pieces, q1 = rows * (j + 1) / pieces, n = q1 - q0;
    const Tensor input = chunk_rows(x, q0, q1, t);  // (t, n, C/t)
    Tensor partial = Tensor::empty({t * n * out_}, DType::F32, MemoryCategory::CommBuffers);  // (t, n, OC)
    project_rows(nn::gemm_input(input), t * n, partial.f32(), /*add_bias=*/false);
    Tensor out = y.view({rows * out_}).narrow(q0 * out_, n * out_);
    const comm::Work sum = start_reduce_scatter_blocks(partial, out, group_);  // under the next piece's GEMM
    if (!overlap_) sum.wait();
    in_flight.emplace_back(sum, partial);
  }
  for (const auto& piece : in_flight) piece.first.wait();
  return y;
}

Tensor RowParallelLinear::backward_impl(const Tensor& dy, nn::Context& ctx) {
  const Tensor& x = ctx.saved(this, 0);  // fp32, or its bf16 copy under mixed precision
  const int t = group_.size();
  Tensor dx;
  if (sequence_parallel_ && t > 1) {
    // dX chunk by chunk (the dy rows of one rank each), this rank's own under the gather.
    // Mixed precision: dy in bf16 once, then gathered as it is (the values the bf16 wire
    // would carry), so every GEMM reads the gathered chunks without converting them again.
    // (the bias gradient from this rank's rows only, summed across tp afterwards, in that pass)
    const Tensor dy_c = bias() != nullptr ? nn::in_compute_precision_adding_bias_grad(dy, bias()->grad().f32(), out_)
                                          : nn::in_compute_precision(dy);
    const SequenceGather dy_full(dy_c, group_);
    if (!overlap_) dy_full.wait();
    const int64_t rows = dy.numel() / out_, me = group_.rank();
    Tensor dx_blocks = Tensor::empty({t * rows * in_}, DType::F32, MemoryCategory::CommBuffers);  // (t, B, T/t, C/t)
    input_gradient_rows(nn::gemm_input(dy_c), rows, dx_blocks.f32() + me * rows * in_);
    const Tensor& dy_blocks = dy_full.blocks();
    for (int r = 0; r < t; ++r)
      if (r != me)
        input_gradient_rows(nn::gemm_input(dy_blocks, r * rows * out_), rows, dx_blocks.f32() + r * rows * in_);
    dx = sequence_from_blocks(dx_blocks, dy.size(0), dy.size(1), in_, t);
    add_weight_gradient(nn::gemm_input(dy_full.whole()), nn::gemm_input(x), x.numel() / in_);
    if (bias() != nullptr) bias()->grad_contributed();
  } else {
    dx = backward_from(dy, x, /*bias_grad=*/true);  // g backward is the identity; dx stays split
  }
  ctx.release(this);
  return dx;
}

}  // namespace loom::parallel::tp
