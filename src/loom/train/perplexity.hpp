// How well a model predicts a text: the mean negative log-likelihood of its tokens (nats per
// token) and the same total in bits per byte of text, which compares models with different
// tokenizers. The tokens are read in consecutive windows of up to block_size + 1 tokens that
// overlap by one, so every token but the first is predicted exactly once, from the tokens
// before it in its window.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "loom/data/tokenizer.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/train/config.hpp"

namespace loom::train {

struct Perplexity {
  double nats_per_token = 0.0;
  double bits_per_byte = 0.0;
  int64_t tokens = 0;  // predicted (all but the first)
  int64_t bytes = 0;   // of the predicted tokens' text
};

// Throws loom::Error when the text has fewer than two tokens. batch: windows per forward.
Perplexity evaluate_perplexity(nn::GPT& model, const data::Tokenizer& tokenizer, std::string_view text, int64_t batch = 8);
// The same on ids already tokenized (a token file's); bytes count the decoded text.
Perplexity evaluate_perplexity_of_tokens(nn::GPT& model, const data::Tokenizer& tokenizer,
                                         const std::vector<int32_t>& ids, int64_t batch = 8);


}  // namespace loom::train
