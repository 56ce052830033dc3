#include "loom/train/perplexity.hpp"

#include <algorithm>
#include <cmath>

#include "loom/error.hpp"
#include "loom/nn/context.hpp"
#include "loom/nn/cross_entropy_loss.hpp"
#include "loom/tensor/memory_tracker.hpp"
#include "loom/train/checkpoint.hpp"
#include "loom/train/memory_budget.hpp"

namespace loom::train {

Perplexity evaluate_perplexity(nn::GPT& model, const data::Tokenizer& tokenizer, std::string_view text, int64_t batch) {
  return evaluate_perplexity_of_tokens(model, tokenizer, tokenizer.encode(text), batch);
}

Perplexity evaluate_perplexity_of_tokens(nn::GPT& model, const data::Tokenizer& tokenizer,
                                         const std::vector<int32_t>& ids, int64_t batch) {
  check(batch >= 1, "batch must be >= 1, got ", batch);
  const auto n = static_cast<int64_t>(ids.size());
  check(n >= 2, "the text has ", n, " token(s); perplexity needs at least 2");
  const int64_t block = model.config().block_size, V = model.config().vocab_size;
  MemoryScope scope(MemoryCategory::Activations);
  double nats = 0.0;
  // Window w predicts tokens (w * block, w * block + T]; all full windows but the last in
  // batches of `batch`, then the rest one by one (a shorter last window has its own T).
  const int64_t windows = (n - 1 + block - 1) / block;
  for (int64_t w = 0; w < windows;) {
    const int64_t T = std::min(block, n - 1 - w * block);
    int64_t B = 1;
    while (B < batch && w + B < windows && std::min(block, n - 1 - (w + B) * block) == T) ++B;
    Tensor inputs = Tensor::empty({B, T}, DType::I32), targets = Tensor::empty({B, T}, DType::I32);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t start = (w + b) * block;
      std::copy(ids.begin() + start, ids.begin() + start + T, inputs.i32() + b * T);
      std::copy(ids.begin() + start + 1, ids.begin() + start + T + 1, targets.i32() + b * T);
    }
    nn::Context ctx;
    const Tensor logits = model.forward(inputs, ctx);
    nats += static_cast<double>(nn::cross_entropy_loss(logits, targets, V)) * static_cast<double>(B * T);
    w += B;
  }
  Perplexity p;
  p.tokens = n - 1;
  p.bytes = static_cast<int64_t>(tokenizer.decode(std::vector<int32_t>(ids.begin() + 1, ids.end())).size());
  p.nats_per_token = nats / static_cast<double>(p.tokens);
  p.bits_per_byte = nats / std::log(2.0) / static_cast<double>(std::max<int64_t>(p.bytes, 1));
  return p;
}

}  // namespace loom::train
