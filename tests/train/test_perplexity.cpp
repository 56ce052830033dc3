// `loom eval`'s perplexity against a direct computation: every token's negative
// log-probability from its own forward pass over the tokens before it in its window
// (log-softmax in double), summed; windows, batching and a shorter last window must not
// change the result beyond fp32 rounding (1e-5 relative).
#include <gtest/gtest.h>

#include <cmath>

#include "loom/error.hpp"
#include "loom/nn/context.hpp"
#include "loom/tensor/memory_tracker.hpp"
#include "loom/train/memory_budget.hpp"
#include "loom/train/perplexity.hpp"

namespace loom::train {
namespace {

double direct_nats(nn::GPT& model, const std::vector<int32_t>& ids) {
  const int64_t block = model.config().block_size, V = model.config().vocab_size,
                Vp = model.config().resolved_padded_vocab();
  double total = 0.0;
  for (size_t i = 1; i < ids.size(); ++i) {
    const auto start = static_cast<int64_t>((i - 1) / static_cast<size_t>(block)) * block;
    const int64_t T = static_cast<int64_t>(i) - start;
    Tensor idx = Tensor::empty({1, T}, DType::I32);
    std::copy(ids.begin() + start, ids.begin() + static_cast<int64_t>(i), idx.i32());
    nn::Context ctx;
    const Tensor logits = model.forward(idx, ctx);
    const float* last = logits.f32() + (T - 1) * Vp;
    double max = last[0], sum = 0.0;
    for (int64_t v = 0; v < V; ++v) max = std::max(max, static_cast<double>(last[v]));
    for (int64_t v = 0; v < V; ++v) sum += std::exp(last[v] - max);
    total += -(last[ids[i]] - max - std::log(sum));
  }
  return total;
}

TEST(Perplexity, EqualsTheDirectComputation) {
  data::ByteTokenizer tokenizer;
  nn::GPT model({.vocab_size = 256, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16}, 5);
  const std::string text = "To be, or not to be, that is the question: whether 'tis nobler";  // 62 bytes: 8 windows, the last short
  const double nats = direct_nats(model, tokenizer.encode(text));
  for (int64_t batch : {1, 3, 16}) {
    const Perplexity p = evaluate_perplexity(model, tokenizer, text, batch);
    EXPECT_EQ(p.tokens, 61);
    EXPECT_EQ(p.bytes, 61);
    EXPECT_NEAR(p.nats_per_token, nats / 61, 1e-5 * nats / 61) << "batch " << batch;
    EXPECT_NEAR(p.bits_per_byte, nats / std::log(2.0) / 61, 1e-5 * nats / 61);
  }
  EXPECT_THROW(evaluate_perplexity(model, tokenizer, "x"), Error);
}

// `loom eval --batch B` holds B windows' activations and logits at once; its memory check
// (scoring_memory) must count them, not one window's: the prediction is a lower bound of the
// tracker's peak at each batch, and it grows with the batch as the peak does.
TEST(Perplexity, MemoryCheckCountsEveryWindowOfTheBatch) {
  data::ByteTokenizer tokenizer;
  const nn::GPTConfig m{.vocab_size = 256, .block_size = 32, .n_layer = 2, .n_head = 2, .n_embd = 16};
  nn::GPT model(m, 5);
  const std::string text(32 * 16 + 1, 'a');  // 16 full windows
  MemoryTracker& tracker = MemoryTracker::instance();
  int64_t last_peak = 0;
  for (const int64_t batch : {1, 4, 16}) {
    tracker.reset_peaks();
    const int64_t before = tracker.current(MemoryCategory::Activations);
    evaluate_perplexity(model, tokenizer, text, batch);
    const int64_t peak = tracker.peak(MemoryCategory::Activations) - before;
    const double predicted = scoring_memory(m, batch).activations;
    EXPECT_LE(predicted, static_cast<double>(peak)) << "batch " << batch;
    EXPECT_GE(predicted, 0.5 * static_cast<double>(peak)) << "batch " << batch;
    EXPECT_GT(peak, last_peak);
    last_peak = peak;
  }
  EXPECT_EQ(scoring_memory(m, 4).activations, 4 * scoring_memory(m, 1).activations);
  EXPECT_EQ(scoring_memory(m, 4).state, inference_memory(m, 1).state);
  EXPECT_EQ(scoring_memory(m, 4).kv_cache, 0.0);
}

}  // namespace
}  // namespace loom::train
