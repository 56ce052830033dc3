#include "loom/train/sampler.hpp"

#include <algorithm>
#include <random>

#include "loom/error.hpp"

namespace loom::train {

void SampleOptions::validate() const {
  sampling().validate();
  request().validate();
}

namespace {

// Every token re-runs the model over the last min(block_size, length) tokens.
std::string sample_uncached(nn::GPT& model, const data::Tokenizer& tokenizer, const SampleOptions& o) {
  std::vector<int32_t> ids = tokenizer.encode(o.prompt);
  const int64_t block = model.config().block_size;
  check_prompt_fits(ids, block);
  const int64_t V = model.config().vocab_size, Vp = model.config().resolved_padded_vocab();
  const SamplingOptions sampling = o.sampling();
  std::mt19937_64 rng(o.seed);
  for (int64_t n = 0; n < o.tokens; ++n) {
    const int64_t T = std::min<int64_t>(block, static_cast<int64_t>(ids.size()));
    Tensor idx = Tensor::empty({1, T}, DType::I32);
    std::copy(ids.end() - T, ids.end(), idx.i32());
    nn::Context ctx;
    Tensor logits = model.forward(idx, ctx);  // (1, T, Vp)
    ids.push_back(pick_token(logits.f32() + (T - 1) * Vp, V, sampling, rng));
  }
  return tokenizer.decode(ids);
}

}  // namespace

std::string sample_text(nn::GPT& model, const data::Tokenizer& tokenizer, const SampleOptions& o) {
  o.validate();
  MemoryScope scope(MemoryCategory::Activations);
  if (!o.kv_cache) return sample_uncached(model, tokenizer, o);
  return generate(model, tokenizer, o.sampling(), {o.request()}, 1).front().text;
}

}  // namespace loom::train
