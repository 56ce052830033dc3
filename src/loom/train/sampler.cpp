#include "loom/train/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "loom/error.hpp"

namespace loom::train {

void SampleOptions::validate() const {
  check(temperature >= 0 && std::isfinite(temperature), "temperature must be a finite number >= 0, got ", temperature);
  check(top_k >= 0, "top_k must be >= 0, got ", top_k);
  check(tokens >= 0 && tokens <= kMaxSampleTokens, "tokens must be between 0 and ", kMaxSampleTokens, ", got ", tokens);
}

std::string sample_text(nn::GPT& model, const data::Tokenizer& tokenizer, const SampleOptions& o) {
  o.validate();
  std::vector<int32_t> ids = tokenizer.encode(o.prompt);
  check(!ids.empty(), "the prompt must not be empty");
  const int64_t V = model.config().vocab_size, Vp = model.config().resolved_padded_vocab();
  const int64_t block = model.config().block_size;
  std::mt19937_64 rng(o.seed);
  MemoryScope scope(MemoryCategory::Activations);
  for (int64_t n = 0; n < o.tokens; ++n) {
    const int64_t T = std::min<int64_t>(block, static_cast<int64_t>(ids.size()));
    Tensor idx = Tensor::empty({1, T}, DType::I32);
    std::copy(ids.end() - T, ids.end(), idx.i32());
    nn::Context ctx;
    Tensor logits = model.forward(idx, ctx);  // (1, T, Vp)
    const float* last = logits.f32() + (T - 1) * Vp;
    if (o.temperature == 0.0) {
      ids.push_back(static_cast<int32_t>(std::max_element(last, last + V) - last));
      continue;
    }
    std::vector<int32_t> order(static_cast<size_t>(V));
    std::iota(order.begin(), order.end(), 0);
    const int64_t k = o.top_k == 0 ? V : std::min(o.top_k, V);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) { return last[a] > last[b]; });
    const double top = last[order[0]];
    std::vector<double> weights(static_cast<size_t>(V), 0.0);
    for (int64_t i = 0; i < k; ++i) weights[order[i]] = std::exp((last[order[i]] - top) / o.temperature);
    std::discrete_distribution<int32_t> pick(weights.begin(), weights.end());
    ids.push_back(pick(rng));
  }
  return tokenizer.decode(ids);
}

}  // namespace loom::train
