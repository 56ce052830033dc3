// Sampling: seeded and reproducible, greedy at temperature 0, top-k 1 is greedy, and bad
// options are errors; a prompt longer than the context is refused alike with and without the
// KV cache.
#include <gtest/gtest.h>

#include "loom/data/tokenizer.hpp"
#include "loom/error.hpp"
#include "loom/train/sampler.hpp"
#include "test_util.hpp"

namespace loom::train {
namespace {

struct Fixture {
  data::CharTokenizer tokenizer = data::CharTokenizer::from_text("abcdefgh \n");
  nn::GPT model{{.vocab_size = 10, .block_size = 8, .n_layer = 1, .n_head = 2, .n_embd = 16}, 3};
};

TEST(Sampler, SameSeedSameTextAndPromptKept) {
  Fixture f;
  SampleOptions o{"abc", 30, 1.0, 0, 7};
  const std::string a = sample_text(f.model, f.tokenizer, o);
  const std::string b = sample_text(f.model, f.tokenizer, o);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.rfind("abc", 0), 0u);
  EXPECT_EQ(a.size(), 33u);  // longer than block_size: the context window slides
  o.seed = 8;
  EXPECT_NE(sample_text(f.model, f.tokenizer, o), a);
}

TEST(Sampler, TemperatureZeroAndTopOneAreGreedy) {
  Fixture f;
  const std::string greedy = sample_text(f.model, f.tokenizer, {"ab", 12, 0.0, 0, 1});
  EXPECT_EQ(sample_text(f.model, f.tokenizer, {"ab", 12, 0.0, 0, 99}), greedy);
  EXPECT_EQ(sample_text(f.model, f.tokenizer, {"ab", 12, 0.7, 1, 5}), greedy);
}

TEST(Sampler, BadOptionsAreErrors) {
  Fixture f;
  EXPECT_THROW(sample_text(f.model, f.tokenizer, {"", 5, 1.0, 0, 1}), Error);
  EXPECT_THROW(sample_text(f.model, f.tokenizer, {"ab", 5, -1.0, 0, 1}), Error);
  EXPECT_THROW(sample_text(f.model, f.tokenizer, {"ab", 5, 1.0, -2, 1}), Error);
  EXPECT_THROW(sample_text(f.model, f.tokenizer, {"xyz", 5, 1.0, 0, 1}), Error);  // not in the vocabulary
}

TEST(Sampler, PromptLongerThanTheContextIsRefusedWithOrWithoutTheCache) {
  // The uncached sampler used to crop such a prompt to its last block_size tokens unsaid.
  Fixture f;
  const std::string want = "the prompt is 9 tokens, longer than the model's context of 8 tokens (block_size)";
  for (const bool kv_cache : {true, false}) {
    SampleOptions o{"abcdefgha", 3, 0.0, 0, 1};
    o.kv_cache = kv_cache;
    EXPECT_EQ(testing::error_of([&] { sample_text(f.model, f.tokenizer, o); }), want) << kv_cache;
    o.prompt = "abcdefgh";  // exactly the context: accepted, and generation slides the window
    EXPECT_EQ(sample_text(f.model, f.tokenizer, o).size(), 11u) << kv_cache;
  }
}

}  // namespace
}  // namespace loom::train
