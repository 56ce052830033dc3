// Text generation from a trained GPT: temperature, top-k and top-p sampling from a seeded
// generator. By default through the KV cache (generation.hpp); the uncached path re-reads
// up to block_size tokens of context for every token and is kept as the reference the
// cached one is tested and benchmarked against.
#pragma once

#include <cstdint>
#include <string>

#include "loom/data/tokenizer.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/train/generation.hpp"

namespace loom::train {

struct SampleOptions {
  std::string prompt = "\n";
  int64_t tokens = 200;      // at most kMaxSampleTokens
  double temperature = 0.8;  // 0: greedy
  int64_t top_k = 40;        // 0: the whole vocabulary
  uint64_t seed = 1;
  double top_p = 1.0;        // 1: no nucleus trimming
  bool kv_cache = true;      // false: re-run the whole context for every token

  // loom::Error naming each value out of range.
  void validate() const;
  SamplingOptions sampling() const { return {temperature, top_k, top_p}; }
  GenerationRequest request() const { return {prompt, tokens, "", seed}; }
};

// Returns the prompt followed by the generated text. Throws if the prompt is empty, longer
// than the context (either path), or has characters outside the tokenizer's vocabulary.
std::string sample_text(nn::GPT& model, const data::Tokenizer& tokenizer, const SampleOptions& options);

}  // namespace loom::train
