// Text generation from a trained GPT: temperature and top-k sampling from a seeded
// generator, re-reading at most block_size tokens of context each step.
#pragma once

#include <cstdint>
#include <string>

#include "loom/data/tokenizer.hpp"
#include "loom/nn/gpt.hpp"

namespace loom::train {

// The most tokens one call generates: each re-reads up to block_size tokens of context,
// so a count like 1e9 would run for days; 100000 is about a book.
constexpr int64_t kMaxSampleTokens = 100000;

struct SampleOptions {
  std::string prompt = "\n";
  int64_t tokens = 200;      // at most kMaxSampleTokens
  double temperature = 0.8;  // 0: greedy
  int64_t top_k = 40;        // 0: the whole vocabulary
  uint64_t seed = 1;

  // loom::Error naming each value out of range.
  void validate() const;
};

// Returns the prompt followed by the generated text. Throws if the prompt has characters
// outside the tokenizer's vocabulary.
std::string sample_text(nn::GPT& model, const data::Tokenizer& tokenizer, const SampleOptions& options);

}  // namespace loom::train
