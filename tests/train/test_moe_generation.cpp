// Generation with the KV cache on a mixture-of-experts GPT against the uncached reference (the
// whole context re-run through training's forward for every token): top-1 and top-2 routing,
// every block or every other one a mixture of experts, fp32 and bf16, single and batched
// prompts of different lengths. Greedy tokens identical for 120 tokens; every step's logits
// within 1e-5 of the largest (fp32: the cached path sums attention, the decode GEMVs and an
// expert's few rows in another order, a few ulps) or 1.2e-2 (bf16: Generation's bound and
// reason, a last-bit difference moving one bf16 operand by 2^-8). The routing is checked to
// spread tokens over the experts, so an expert or gate taken wrongly would show. Experts with a
// capacity that can never drop (moe_capacity_factor >= E / K) are cached like dropless ones; a
// model whose experts may drop tokens over capacity is refused by name (the uncached path still
// samples it), even for a request too short to drop any.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <utility>

#include "loom/error.hpp"
#include "loom/kernels/gemv.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/nn/cached_forward.hpp"
#include "loom/nn/moe.hpp"
#include "loom/nn/routing.hpp"
#include "loom/train/sampler.hpp"
#include "test_util.hpp"

namespace loom::train {
namespace {

using loom::testing::relative_error;

struct Moe {
  int64_t top_k, every;
  double capacity_factor = 0.0;
};

// 2 layers, 4 experts. Weights scaled up (x3) from the GPT-2 init so the logits and the
// router's probabilities are far from ties: greedy tokens and expert choices then do not
// flip on rounding, and a mismatch means a real difference.
struct MoeModel {
  data::CharTokenizer tokenizer = data::CharTokenizer::from_text("abcdefghijklmnopqrstuvwxyz .,\n");
  nn::GPT model;
  MoeModel(Moe r, int64_t block_size = 160)
      : model({.vocab_size = 30, .block_size = block_size, .n_layer = 2, .n_head = 2, .n_embd = 16,
               .moe = {.experts = 4, .top_k = r.top_k, .capacity_factor = r.capacity_factor, .every = r.every}},
              7) {
    for (nn::Parameter* p : model.parameters())
      for (int64_t i = 0; i < p->value().numel(); ++i) p->value().f32()[i] *= 3.0f;
  }
};

// "1.2e-07": a property's value (std::to_string would print 0.000000).
std::string scientific(double x) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2g", x);
  return text;
}

std::string name(Moe r) {
  return "top-" + std::to_string(r.top_k) + ", moe_every " + std::to_string(r.every) +
         (r.capacity_factor > 0.0 ? ", capacity factor " + scientific(r.capacity_factor) : "");
}

// A property name's suffix for the row.
std::string tag(Moe r) {
  return std::to_string(r.top_k) + "_" + std::to_string(r.every) +
         (r.capacity_factor > 0.0 ? "_f" + scientific(r.capacity_factor) : "");
}

// The cached decode fed `ids` (a prompt of `prompt` tokens, then one at a time) against a
// full forward over the same tokens at every step: the worst relative logit error. Also
// checks that the full forwards sent tokens to more than one expert of each MoE block.
double cached_vs_full(nn::GPT& model, const std::vector<int32_t>& ids, int64_t prompt) {
  const int64_t V = model.config().vocab_size, Vp = model.config().resolved_padded_vocab();
  nn::KVCache cache(model, 1);
  Tensor cached = nn::forward_cached(model, cache, {ids.begin(), ids.begin() + prompt}, std::vector<int64_t>(prompt, 0),
                                     {prompt - 1});
  double worst = 0.0;
  (void)nn::take_moe_stats(model);
  for (int64_t n = prompt; n <= static_cast<int64_t>(ids.size()); ++n) {
    Tensor idx = Tensor::empty({1, n}, DType::I32);
    std::copy(ids.begin(), ids.begin() + n, idx.i32());
    nn::Context ctx;
    const Tensor full = model.forward(idx, ctx);  // (1, n, Vp)
    worst = std::max(worst, relative_error(cached.f32(), full.f32() + (n - 1) * Vp, V));
    if (n < static_cast<int64_t>(ids.size())) cached = nn::forward_cached(model, cache, {ids[n]}, {0}, {0});
  }
  const nn::MoeStats stats = nn::take_moe_stats(model);
  EXPECT_EQ(stats.dropped, 0);
  const int64_t used = std::count_if(stats.load.begin(), stats.load.end(), [](int64_t l) { return l > 0; });
  EXPECT_GE(used, 3) << "the routing should spread tokens over the experts";
  return worst;
}

// The last two with capacities that can never drop (f K = E = 4): ceil(f K T / E) = T, the most
// one expert can get of a sequence of T tokens.
const Moe kRoutings[] = {{1, 1}, {2, 1}, {1, 2}, {2, 2}, {2, 1, 2.0}, {1, 2, 4.0}};

// 120 greedy tokens after "the cat" through the KV cache equal the uncached sampler's; the
// text's tokens, for comparing logits along it.
std::vector<int32_t> greedy_uncached_equals_cached(MoeModel& m, Moe r) {
  const SampleOptions o{"the cat", 120, 0.0, 0, 1};
  SampleOptions uncached = o;
  uncached.kv_cache = false;
  const std::string reference = sample_text(m.model, m.tokenizer, uncached);
  EXPECT_EQ(sample_text(m.model, m.tokenizer, o), reference) << name(r);
  return m.tokenizer.encode(reference);
}

TEST(MoeGeneration, CachedGreedyEqualsUncachedLogitsWithin1e5) {
  for (const Moe r : kRoutings) {
    MoeModel m(r);
    const std::vector<int32_t> ids = greedy_uncached_equals_cached(m, r);
    const double worst = cached_vs_full(m.model, ids, 7);
    EXPECT_LT(worst, 1e-5) << name(r);
    RecordProperty("worst_relative_logit_error_" + tag(r), scientific(worst));
  }
}

TEST(MoeGeneration, Bf16CachedEqualsUncachedBf16) {
  for (const Moe r : kRoutings) {
    MoeModel m(r);
    const kernels::PrecisionScope bf16(kernels::Precision::BF16);
    const std::vector<int32_t> ids = greedy_uncached_equals_cached(m, r);
    const double worst = cached_vs_full(m.model, {ids.begin(), ids.begin() + 7 + 48}, 7);
    EXPECT_LT(worst, 1.2e-2) << name(r);
    RecordProperty("worst_relative_logit_error_bf16_" + tag(r), scientific(worst));
  }
}

// Prompts of different lengths decoded together (batches of 6, past the GEMV's rows, so the
// experts' rows of a step may go through the packed weights, and of 2, sequences joining as
// others finish): each greedy text equals the uncached sampler's for its prompt, and sampled
// texts equal each request generated alone.
TEST(MoeGeneration, BatchedPromptsOfDifferentLengthsEqualTheUncachedSampler) {
  const std::vector<GenerationRequest> requests = {{"a", 30, "", 11}, {"hello there", 45, "", 12},
                                                   {"xyz.", 20, "", 13}, {"a much longer prompt", 35, "", 14},
                                                   {"q", 40, "", 15}, {"bb", 25, "", 16}};
  for (const kernels::Precision precision : {kernels::Precision::F32, kernels::Precision::BF16}) {
    const kernels::PrecisionScope scope(precision);
    const std::string p = precision == kernels::Precision::F32 ? "fp32" : "bf16";
    for (const Moe r : {Moe{1, 1}, Moe{2, 2}, Moe{2, 1, 2.0}}) {
      MoeModel m(r, /*block_size=*/32);  // the longer ones slide their window
      for (const int64_t batch : {6, 2}) {
        const auto greedy = generate(m.model, m.tokenizer, {0.0, 0, 1.0}, requests, batch);
        for (size_t i = 0; i < requests.size(); ++i) {
          SampleOptions uncached{requests[i].prompt, requests[i].max_tokens, 0.0, 0, 1};
          uncached.kv_cache = false;
          EXPECT_EQ(greedy[i].text, sample_text(m.model, m.tokenizer, uncached))
              << p << ", " << name(r) << ", batch " << batch << ", request " << i;
        }
        const SamplingOptions sampling{1.0, 10, 0.9};
        const auto together = generate(m.model, m.tokenizer, sampling, requests, batch);
        for (size_t i = 0; i < requests.size(); ++i)
          EXPECT_EQ(together[i].text, generate(m.model, m.tokenizer, sampling, {requests[i]}, 1).front().text)
              << p << ", " << name(r) << ", batch " << batch << ", request " << i;
      }
    }
  }
}

// Routed alone, a block of tokens gets what the layer's training forward gives it as one
// sequence: bit for bit in a training context (the same rows grouped by expert in the same
// order, the same GEMMs), within 1e-6 in an inference one (an expert's few rows through the GEMV).
// Dropless, and with the smallest capacity factor that can never drop (E / K).
TEST(MoeGeneration, ForwardTokensIsTheLayersForward) {
  for (const auto [K, f] : {std::pair<int64_t, double>{1, 0.0}, {2, 0.0}, {1, 4.0}, {2, 2.0}}) {
    nn::MoeConfig config{.experts = 4, .top_k = K, .capacity_factor = f};
    nn::MoE moe(16, config);
    uint64_t seed = 3;
    for (nn::Parameter* p : moe.parameters()) {
      const auto v = loom::testing::random_vector(p->value().numel(), seed++, -0.5f, 0.5f);
      std::copy(v.begin(), v.end(), p->value().f32());
    }
    const int64_t T = 9;
    const auto v = loom::testing::random_vector(T * 16, 40);
    Tensor x = Tensor::empty({1, T, 16});
    std::copy(v.begin(), v.end(), x.f32());
    nn::Context train_ctx, plain_ctx, inference_ctx;
    inference_ctx.set_inference(true);
    const Tensor want = moe.forward(x, train_ctx);
    const Tensor plain = moe.forward_tokens(x.view({T, 16}), plain_ctx);
    const Tensor few_rows = moe.forward_tokens(x.view({T, 16}), inference_ctx);
    ASSERT_EQ(plain.shape(), (Shape{T, 16}));
    EXPECT_EQ(0, std::memcmp(plain.raw(), want.raw(), want.nbytes())) << "K " << K << ", f " << f;
    EXPECT_TRUE(loom::testing::all_close(few_rows.f32(), want.f32(), want.numel(), 1e-6, 1e-6)) << "K " << K << ", f " << f;
    const nn::MoeStats stats = moe.take_stats();
    EXPECT_EQ(stats.forwards, 1) << "forward_tokens records no statistics";
    EXPECT_EQ(stats.dropped, 0) << "K " << K << ", f " << f;
  }
}

// Capacity is decided over each whole sequence, so a cached token's output would change as the
// text grows: the KV cache refuses such a model, naming the block and the way out, before it
// claims a position; the uncached sampler runs it as training's forward does. Any factor below
// E / K is refused, even one whose capacity drops nothing for the request at hand: f = 1.9
// (capacity ceil(0.95 T)) drops only from T = 20 on, and "ab" + 5 tokens is 7.
TEST(MoeGeneration, ExpertsWithCapacityThatCanDropAreRefusedByTheKvCache) {
  for (const Moe r : {Moe{2, 1, 1.9}, Moe{1, 2, 3.9}}) {
    MoeModel m(r);
    for (int64_t T = 1; T <= 7; ++T)
      ASSERT_GE(nn::expert_capacity(r.capacity_factor, r.top_k, T, 4), T) << name(r) << ": nothing drops here";
    const std::string refused = loom::testing::error_of(
        [&] { generate(m.model, m.tokenizer, {0.0, 0, 1.0}, {{"ab", 5, "", 1}}, 1); });
    EXPECT_NE(refused.find("its experts drop tokens over capacity (moe_capacity_factor " +
                           scientific(r.capacity_factor) + ", below moe_experts / moe_top_k = " +
                           std::to_string(4 / r.top_k) + ", from which none can drop)"),
              std::string::npos)
        << name(r) << ": " << refused;
  }
  MoeModel m({2, 1, 1.25});
  const std::string message =
      "block 'blocks.0' is a mixture of experts: its experts drop tokens over capacity (moe_capacity_factor 1.25, "
      "below moe_experts / moe_top_k = 2, from which none can drop), decided over each whole sequence: a token's "
      "choices may be dropped for tokens after it, and the capacity grows with the context, so earlier tokens' outputs "
      "change as the text grows and a KV cache cannot hold them; sample it with `loom sample --prompt TEXT --no-kv-cache` on one process (the whole context re-run for every token, as "
      "training's forward runs it): loom generate, --prompts-file and --tp need the KV cache";
  EXPECT_EQ(loom::testing::error_of([&] { generate(m.model, m.tokenizer, {0.0, 0, 1.0}, {{"ab", 5, "", 1}}, 1); }),
            message);
  nn::KVCache cache(m.model, 1);
  EXPECT_EQ(loom::testing::error_of([&] { nn::forward_cached(m.model, cache, {1, 2}, {0, 0}, {1}); }), message);
  EXPECT_EQ(cache.length(0), 0);
  SampleOptions uncached{"ab", 5, 0.0, 0, 1};
  uncached.kv_cache = false;
  EXPECT_EQ(sample_text(m.model, m.tokenizer, uncached).size(), 7u);
}

}  // namespace
}  // namespace loom::train
