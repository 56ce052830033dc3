#include "loom/train/generation.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "loom/error.hpp"
#include "loom/nn/cached_forward.hpp"
#include "loom/tensor/allocator.hpp"

namespace loom::train {

void SamplingOptions::validate() const {
  check(temperature >= 0 && std::isfinite(temperature), "temperature must be a finite number >= 0, got ", temperature);
  check(top_k >= 0, "top_k must be >= 0, got ", top_k);
  check(top_p > 0 && top_p <= 1, "top_p must be in (0, 1], got ", top_p);
}

void GenerationRequest::validate() const {
  check(max_tokens >= 0 && max_tokens <= kMaxSampleTokens, "tokens must be between 0 and ", kMaxSampleTokens,
        ", got ", max_tokens);
}

void check_prompt_fits(const std::vector<int32_t>& prompt, int64_t block_size) {
  check(!prompt.empty(), "the prompt must not be empty");
  check(static_cast<int64_t>(prompt.size()) <= block_size, "the prompt is ", prompt.size(),
        " tokens, longer than the model's context of ", block_size, " tokens (block_size)");
}

int32_t pick_token(const float* logits, int64_t V, const SamplingOptions& o, std::mt19937_64& rng) {
  // A model whose weights diverged yields NaN or inf logits: every pick would be arbitrary
  // (token 0 for greedy), so the text would look generated while meaning nothing.
  for (int64_t v = 0; v < V; ++v)
    check(std::isfinite(logits[v]), "the model's logits are not finite (", logits[v], " for token ", v,
          "): its weights diverged; sample from an earlier checkpoint");
  if (o.temperature == 0.0) return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  const int64_t k = o.top_k == 0 ? V : std::min(o.top_k, V);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const double top = logits[order[0]];
  std::vector<double> weights(static_cast<size_t>(V), 0.0);
  double total = 0.0;
  for (int64_t i = 0; i < k; ++i) total += weights[order[i]] = std::exp((logits[order[i]] - top) / o.temperature);
  if (o.top_p < 1.0) {
    // order[0, k) is sorted by probability: keep the shortest prefix holding top_p of it.
    double kept = 0.0;
    int64_t i = 0;
    while (i < k && kept < o.top_p * total) kept += weights[order[i++]];
    for (; i < k; ++i) weights[order[i]] = 0.0;
  }
  std::discrete_distribution<int32_t> pick(weights.begin(), weights.end());
  return pick(rng);
}

struct Generator::Sequence {
  int64_t id = 0, slot = 0;
  GenerationRequest request;
  std::vector<int32_t> ids;  // prompt, then the new tokens
  int64_t prompt_tokens = 0;
  std::mt19937_64 rng;
  std::string finish;  // set once done
};

Generator::Generator(nn::GPT& model, const data::Tokenizer& tokenizer, const SamplingOptions& options,
                     int64_t max_batch)
    : model_(model), tokenizer_(tokenizer), options_(options), cache_(model, max_batch) {
  options_.validate();
  nn::check_kv_cacheable(model_);  // refused here, not at every request's prefill
  slots_.resize(static_cast<size_t>(max_batch));
}

Generator::~Generator() = default;

bool Generator::full() const {
  return std::all_of(slots_.begin(), slots_.end(), [](const auto& s) { return s != nullptr; });
}

bool Generator::empty() const {
  return std::all_of(slots_.begin(), slots_.end(), [](const auto& s) { return s == nullptr; });
}

void Generator::add(const GenerationRequest& request, int64_t id) {
  request.validate();
  check(!full(), "the generator's batch is full (", slots_.size(), " sequences)");
  std::vector<int32_t> prompt = tokenizer_.encode(request.prompt);
  check_prompt_fits(prompt, cache_.capacity());
  const int64_t n = static_cast<int64_t>(prompt.size());
  const int64_t slot = std::find(slots_.begin(), slots_.end(), nullptr) - slots_.begin();
  auto s = std::make_unique<Sequence>();
  s->id = id;
  s->slot = slot;
  s->request = request;
  s->ids = std::move(prompt);
  s->prompt_tokens = n;
  s->rng.seed(request.seed);
  cache_.clear(slot);
  const Tensor logits = nn::forward_cached(model_, cache_, s->ids, std::vector<int64_t>(static_cast<size_t>(n), slot), {n - 1});
  advance(*s, logits.f32());
  slots_[static_cast<size_t>(slot)] = std::move(s);
}

void Generator::advance(Sequence& s, const float* logits) {
  const int64_t made = static_cast<int64_t>(s.ids.size()) - s.prompt_tokens;
  if (made >= s.request.max_tokens) {
    s.finish = "length";
    return;
  }
  s.ids.push_back(pick_token(logits, model_.config().vocab_size, options_, s.rng));
  if (!s.request.stop.empty()) {
    const std::string text = tokenizer_.decode({s.ids.begin() + s.prompt_tokens, s.ids.end()});
    if (text.find(s.request.stop) != std::string::npos) s.finish = "stop";
  }
  if (s.finish.empty() && made + 1 >= s.request.max_tokens) s.finish = "length";
}

Generated Generator::finish(Sequence& s) {
  Generated g;
  g.id = s.id;
  g.tokens.assign(s.ids.begin() + s.prompt_tokens, s.ids.end());
  std::string text = tokenizer_.decode(g.tokens);
  if (s.finish == "stop") text.resize(text.find(s.request.stop) + s.request.stop.size());
  g.text = s.request.prompt + text;
  g.finish = s.finish;
  return g;
}

std::vector<Generated> Generator::step() {
  std::vector<Generated> done;
  std::vector<int32_t> tokens;
  std::vector<int64_t> slots, rows;
  std::vector<Sequence*> decoding;
  for (auto& s : slots_) {
    if (s == nullptr || !s->finish.empty()) continue;
    if (cache_.length(s->slot) < cache_.capacity()) {
      rows.push_back(static_cast<int64_t>(tokens.size()));
      tokens.push_back(s->ids.back());
      slots.push_back(s->slot);
      decoding.push_back(s.get());
      continue;
    }
    // The context is full: slide the window, prefilling the last block_size tokens again.
    const int64_t T = cache_.capacity();
    cache_.clear(s->slot);
    const std::vector<int32_t> window(s->ids.end() - T, s->ids.end());
    const Tensor logits =
        nn::forward_cached(model_, cache_, window, std::vector<int64_t>(static_cast<size_t>(T), s->slot), {T - 1});
    advance(*s, logits.f32());
  }
  if (!tokens.empty()) {
    const Tensor logits = nn::forward_cached(model_, cache_, tokens, slots, rows, &packed_);  // (B, V)
    const int64_t V = logits.size(1);
    for (size_t i = 0; i < decoding.size(); ++i) advance(*decoding[i], logits.f32() + static_cast<int64_t>(i) * V);
  }
  for (auto& s : slots_)
    if (s != nullptr && !s->finish.empty()) {
      done.push_back(finish(*s));
      s.reset();
    }
  // Run dry, the generator hands the tensor allocator's cached blocks back: each prompt length
  // leaves blocks of its own sizes, which a long-running `loom generate` would otherwise keep
  // beside the next request's (30 prompts of 700-990 tokens, width 768: 902 MB peak RSS, 387
  // with this). The next prefill takes its blocks from malloc again.
  if (empty()) release_cached_blocks();
  return done;
}

std::vector<Generated> generate(nn::GPT& model, const data::Tokenizer& tokenizer, const SamplingOptions& options,
                                const std::vector<GenerationRequest>& requests, int64_t max_batch) {
  Generator generator(model, tokenizer, options, std::max<int64_t>(1, std::min<int64_t>(max_batch, static_cast<int64_t>(requests.size()))));
  std::vector<Generated> results(requests.size());
  size_t next = 0;
  while (next < requests.size() || !generator.empty()) {
    while (next < requests.size() && !generator.full()) {
      generator.add(requests[next], static_cast<int64_t>(next));
      ++next;
    }
    for (Generated& g : generator.step()) results[static_cast<size_t>(g.id)] = std::move(g);
  }
  return results;
}

}  // namespace loom::train
