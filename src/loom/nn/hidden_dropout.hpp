// Hidden dropout (Megatron-LM's hidden_dropout, nanoGPT's embedding and residual dropout):
// inverted dropout on the embedding's output and on each attention and MLP output before it
// joins the residual stream, while training. An element's mask is drawn from its place in the
// step's whole batch (seed, step, site, global row, position, feature: kernels/dropout.hpp),
// so a rank holding some of the rows, or a chunk of each sequence (context and sequence
// parallelism), drops exactly what the serial run drops there. Nothing is kept for backward:
// it draws the same mask again.
#pragma once

#include <cstdint>

#include "loom/nn/context.hpp"
#include "loom/nn/sequence_parts.hpp"

namespace loom::nn {

class HiddenDropout {
 public:
  HiddenDropout() = default;
  // p: the probability; site: which use in the model (distinct sites draw distinct masks);
  // block_size: the training sequence length (positions run below it); parts: how the
  // sequences of the tensors this sees are split over ranks.
  HiddenDropout(double p, uint64_t site, int64_t block_size, const SequenceParts& parts)
      : p_(static_cast<float>(p)), site_(site), block_size_(block_size), parts_(&parts) {}
  // Whether apply() changes anything in this context (a training micro-batch's, p > 0).
  bool active(const Context& ctx) const { return p_ > 0.0f && ctx.dropout_rows().has_value(); }
  // x (B, T, C) fp32, in place: the mask times 1 / (1 - p). Forward applies it to the output,
  // backward to the output's gradient.
  void apply(Tensor& x, const Context& ctx) const;

 private:
  float p_ = 0.0f;
  uint64_t site_ = 0;
  int64_t block_size_ = 0;
  const SequenceParts* parts_ = nullptr;
};

}  // namespace loom::nn
