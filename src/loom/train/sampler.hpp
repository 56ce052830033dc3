// Text generation from a trained GPT: temperature and top-k sampling from a seeded
// generator, re-reading at most block_size tokens of context each step.
#pragma once

#include <cstdint>
#include <string>

#include "loom/data/tokenizer.hpp"
#include "loom/nn/gpt.hpp"

namespace loom::train {

struct SampleOptions {
  std::string prompt = "\n";
  int64_t tokens = 200;
  double temperature = 0.8;  // 0: greedy
  int64_t top_k = 40;        // 0: the whole vocabulary
  uint64_t seed = 1;
};

// Returns the prompt followed by the generated text. Throws if the prompt has characters
// outside the tokenizer's vocabulary.
std::string sample_text(nn::GPT& model, const data::Tokenizer& tokenizer, const SampleOptions& options);

}  // namespace loom::train
