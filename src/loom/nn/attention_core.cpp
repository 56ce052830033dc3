#include "loom/nn/attention_core.hpp"

#include "loom/kernels/dropout.hpp"

namespace loom::nn {

kernels::AttentionDropout AttentionCore::dropout(const Context& ctx) const {
  if (dropout_.p <= 0.0 || !ctx.dropout_rows().has_value()) return {};
  const DropoutRows& d = *ctx.dropout_rows();
  return {.p = static_cast<float>(dropout_.p), .key = kernels::dropout_key(d.seed, d.step, dropout_.site),
          .first_row = d.first_row, .heads = dropout_.heads, .first_head = dropout_.first_head,
          .positions = dropout_.block_size};
}

}  // namespace loom::nn
