// Generation with a KV cache and continuous batching: each request (prompt, token budget,
// stop text, seed) is prefilled into a free cache slot; every step decodes one token of each
// sequence in the batch together (the projections read the weights once for the whole
// batch); a sequence that finishes leaves the batch and its slot takes the next request.
// Each sequence samples from its own seeded generator, so its text does not depend on what
// else is in the batch. A sequence whose context reaches block_size slides its window: the
// last block_size tokens are prefilled again, the same context the uncached sampler reads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "loom/data/tokenizer.hpp"
#include "loom/kernels/packed_weights.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/nn/kv_cache.hpp"

namespace loom::train {

// The most tokens one request generates (once its context is full every token re-reads
// block_size tokens, so 1e9 would run for days; 100000 is about a book).
constexpr int64_t kMaxSampleTokens = 100000;

struct SamplingOptions {
  double temperature = 0.8;  // 0: greedy
  int64_t top_k = 40;        // 0: the whole vocabulary
  double top_p = 1.0;        // nucleus: the fewest most likely tokens holding this much probability
  // loom::Error naming each value out of range.
  void validate() const;
};

// The next token from one row of logits (V): greedy at temperature 0 (no draw), else a draw
// among the top_k most likely, trimmed to the top_p nucleus, with probabilities
// softmax(logits / temperature).
int32_t pick_token(const float* logits, int64_t V, const SamplingOptions& options, std::mt19937_64& rng);

// loom::Error unless the prompt's tokens are 1 to block_size: the cached and the uncached
// sampler both refuse a longer prompt rather than crop it silently (the window slides only
// once generation runs past the context).
void check_prompt_fits(const std::vector<int32_t>& prompt, int64_t block_size);

struct GenerationRequest {
  std::string prompt;
  int64_t max_tokens = 200;  // at most kMaxSampleTokens
  std::string stop;          // generation ends once the new text contains it ("": never)
  uint64_t seed = 1;
  void validate() const;
};

struct Generated {
  int64_t id = 0;               // the request's, as given to add()
  std::string text;             // the prompt, then the new text (up to and including a stop text)
  std::vector<int32_t> tokens;  // the new tokens
  std::string finish;           // "length" or "stop"
};

class Generator {
 public:
  // max_batch: sequences decoded together (cache slots).
  Generator(nn::GPT& model, const data::Tokenizer& tokenizer, const SamplingOptions& options, int64_t max_batch);
  ~Generator();

  bool full() const;
  bool empty() const;
  // Encodes and prefills the request into a free slot (loom::Error for an empty prompt or
  // one longer than the context, when full()), and samples its first token.
  void add(const GenerationRequest& request, int64_t id);
  // One decode step of every sequence still generating; returns those that finished.
  std::vector<Generated> step();

 private:
  struct Sequence;
  void advance(Sequence& s, const float* logits);
  Generated finish(Sequence& s);

  nn::GPT& model_;
  const data::Tokenizer& tokenizer_;
  SamplingOptions options_;
  nn::KVCache cache_;
  kernels::PackedWeights packed_;  // the weights as the batched decode step's oneDNN reads them
  std::vector<std::unique_ptr<Sequence>> slots_;  // null: free
};

// Every request, at most max_batch at a time, new ones joining as others finish; the
// results in request order.
std::vector<Generated> generate(nn::GPT& model, const data::Tokenizer& tokenizer, const SamplingOptions& options,
                                const std::vector<GenerationRequest>& requests, int64_t max_batch);

}  // namespace loom::train
