#include "loom/nn/hidden_dropout.hpp"

#include <vector>

#include "loom/error.hpp"
#include "loom/kernels/dropout.hpp"

namespace loom::nn {

void HiddenDropout::apply(Tensor& x, const Context& ctx) const {
  if (!active(ctx)) return;
  check(x.ndim() == 3 && x.dtype() == DType::F32, "hidden dropout expects (B, T, C) fp32, got ", shape_str(x.shape()),
        " ", dtype_name(x.dtype()));
  const DropoutRows& d = *ctx.dropout_rows();
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  const std::vector<int64_t> positions = parts_->positions(T);
  // Row id of each local (b, t): its sequence's row in the step's batch, then its position.
  std::vector<int64_t> rows(static_cast<size_t>(B * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      rows[static_cast<size_t>(b * T + t)] = (d.first_row + b) * block_size_ + positions[static_cast<size_t>(t)];
  kernels::dropout_forward_block(x.f32(), /*mask=*/nullptr, x.f32(), B * T, C, rows.data(), /*col0=*/0, C, p_,
                                 kernels::dropout_key(d.seed, d.step, site_));
}

}  // namespace loom::nn
