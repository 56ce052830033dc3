// Tensor-parallel generation (heads and MLP split over the world, as `loom sample --tp`):
// the same greedy tokens as the serial cached and uncached paths for 200 tokens, batched and
// single, and every decode step's logits within 1e-5 relative of the serial ones (the ranks'
// partial sums are added in another order than the serial GEMV's, a few ulps); in bf16 the
// same tokens as serial bf16 and as the uncached bf16 sampler, logits within 1e-3 (each rank
// rounds its slice of the same activations and weights, so only fp32 sums may differ); and
// the same for a mixture-of-experts GPT, its experts replicated over tp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "comm/mpi_test_env.hpp"
#include "loom/data/tokenizer.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/nn/cached_forward.hpp"
#include "loom/parallel/tensor_parallel/tensor_parallel_layers.hpp"
#include "loom/train/generation.hpp"
#include "loom/train/sampler.hpp"
#include "test_util.hpp"

namespace loom::parallel::tp {
namespace {

using loom::testing::world;

// One head and 8 channels per rank, any world size; weights scaled up from the init (the
// same on every layout) so greedy decoding is far from ties.
nn::GPTConfig config() {
  const int64_t t = world().size();
  return {.vocab_size = 30, .padded_vocab_size = 64 * t, .block_size = 256, .n_layer = 2, .n_head = t, .n_embd = 8 * t};
}

void scale(nn::GPT& model) {
  for (nn::Parameter* p : model.parameters())
    for (int64_t i = 0; i < p->value().numel(); ++i) p->value().f32()[i] *= 4.0f;
}

// The largest relative difference of 20 decode steps' logits between the two models, three
// sequences in one batch after a shared prompt.
double worst_decode_logits_difference(nn::GPT& serial, nn::GPT& parallel) {
  nn::KVCache serial_cache(serial, 3), parallel_cache(parallel, 3);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const std::vector<int64_t> slots = {0, 0, 0, 1, 1, 2, 2, 2, 2};
  nn::forward_cached(serial, serial_cache, prompt, slots, {2});
  nn::forward_cached(parallel, parallel_cache, prompt, slots, {2});
  double worst = 0.0;
  for (int32_t step = 0; step < 20; ++step) {
    const std::vector<int32_t> tokens = {step % 30, (step * 7) % 30, (step * 3 + 1) % 30};
    const Tensor want = nn::forward_cached(serial, serial_cache, tokens, {0, 1, 2}, {0, 1, 2});
    const Tensor got = nn::forward_cached(parallel, parallel_cache, tokens, {0, 1, 2}, {0, 1, 2});
    EXPECT_EQ(got.shape(), want.shape());
    if (got.shape() != want.shape()) return INFINITY;
    worst = std::max(worst, loom::testing::relative_error(got.f32(), want.f32(), want.numel()));
  }
  return worst;
}

TEST(TensorParallelGeneration, SameTokensAndLogitsAsSerial) {
  const data::CharTokenizer tokenizer = data::CharTokenizer::from_text("abcdefghijklmnopqrstuvwxyz .,\n");
  nn::GPT serial(config(), 5);
  scale(serial);
  TensorParallelLayers layers(world(), /*sequence_parallel=*/false);
  nn::GPT parallel(config(), 5, layers);
  scale(parallel);

  const train::SamplingOptions greedy{0.0, 0, 1.0};
  const std::vector<train::GenerationRequest> requests = {{"the cat", 200, "", 1}, {"a", 60, "", 2}, {"xy z", 90, "", 3}};
  const auto serial_out = train::generate(serial, tokenizer, greedy, requests, 3);
  const auto parallel_out = train::generate(parallel, tokenizer, greedy, requests, 3);
  train::SampleOptions uncached{"the cat", 200, 0.0, 0, 1};
  uncached.kv_cache = false;
  EXPECT_EQ(parallel_out[0].text, train::sample_text(serial, tokenizer, uncached));
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(parallel_out[i].text, serial_out[i].text) << i;
  EXPECT_EQ(train::generate(parallel, tokenizer, greedy, {requests[1]}, 1).front().text, serial_out[1].text);

  // Decode-step logits, three sequences in one batch.
  EXPECT_LT(worst_decode_logits_difference(serial, parallel), 1e-5);
}

TEST(TensorParallelGeneration, Bf16SameTokensAsSerialBf16) {
  const data::CharTokenizer tokenizer = data::CharTokenizer::from_text("abcdefghijklmnopqrstuvwxyz .,\n");
  nn::GPT serial(config(), 5);
  scale(serial);
  TensorParallelLayers layers(world(), /*sequence_parallel=*/false);
  nn::GPT parallel(config(), 5, layers);
  scale(parallel);
  const kernels::PrecisionScope bf16(kernels::Precision::BF16);
  const train::SamplingOptions greedy{0.0, 0, 1.0};
  const std::vector<train::GenerationRequest> requests = {{"the cat", 60, "", 1}, {"a", 30, "", 2}};
  const auto serial_out = train::generate(serial, tokenizer, greedy, requests, 2);
  const auto parallel_out = train::generate(parallel, tokenizer, greedy, requests, 2);
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(parallel_out[i].text, serial_out[i].text) << i;
  train::SampleOptions uncached{"the cat", 60, 0.0, 0, 1};
  uncached.kv_cache = false;
  EXPECT_EQ(parallel_out[0].text, train::sample_text(serial, tokenizer, uncached));

  nn::KVCache serial_cache(serial, 1), parallel_cache(parallel, 1);
  const std::vector<int32_t> prompt = {1, 2, 3, 4};
  nn::forward_cached(serial, serial_cache, prompt, {0, 0, 0, 0}, {3});
  nn::forward_cached(parallel, parallel_cache, prompt, {0, 0, 0, 0}, {3});
  double worst = 0.0;
  for (int32_t step = 0; step < 20; ++step) {
    const Tensor want = nn::forward_cached(serial, serial_cache, {(step * 7) % 30}, {0}, {0});
    const Tensor got = nn::forward_cached(parallel, parallel_cache, {(step * 7) % 30}, {0}, {0});
    worst = std::max(worst, loom::testing::relative_error(got.f32(), want.f32(), want.numel()));
  }
  EXPECT_LT(worst, 1e-3);  // measured 0 at 2 and 3 ranks; the serial test's bound and reason
}

// A mixture of experts under tp: its router and experts replicated over tp as training
// holds them (no sequence parallelism in inference), every rank routing the same tokens; the
// same greedy tokens as the serial cached and uncached paths, fp32 and bf16, top-2 in every
// block and top-1 in every other one. Decode logits within 1e-5 in fp32; in bf16 within
// 1.2e-2, the serial bf16 bound (Generation.Bf16CachedEqualsUncachedFor200TokensNearFp32):
// the experts read the whole residual stream rounded to bf16, and the attention output's
// partial sums added in another order can move one of its values across a rounding boundary,
// 2^-8 of it (measured 0 at 2 and 3 ranks, up to 3.5e-3 at 4, 5 and 8; fp32 at most 1.2e-6).
TEST(TensorParallelGeneration, MixtureOfExpertsSameTokensAndLogitsAsSerial) {
  const data::CharTokenizer tokenizer = data::CharTokenizer::from_text("abcdefghijklmnopqrstuvwxyz .,\n");
  for (const auto& [top_k, every] : {std::pair<int64_t, int64_t>{2, 1}, {1, 2}}) {
    nn::GPTConfig c = config();
    c.moe = {.experts = 4, .top_k = top_k, .every = every};
    nn::GPT serial(c, 5);
    scale(serial);
    TensorParallelLayers layers(world(), /*sequence_parallel=*/false);
    nn::GPT parallel(c, 5, layers);
    scale(parallel);
    for (const auto& [precision, bound] :
         {std::pair{kernels::Precision::F32, 1e-5}, std::pair{kernels::Precision::BF16, 1.2e-2}}) {
      const kernels::PrecisionScope scope(precision);
      const std::string where = "top-" + std::to_string(top_k) + ", every " + std::to_string(every) +
                                (precision == kernels::Precision::F32 ? ", fp32" : ", bf16");
      const train::SamplingOptions greedy{0.0, 0, 1.0};
      const std::vector<train::GenerationRequest> requests = {
          {"the cat", 80, "", 1}, {"a", 40, "", 2}, {"xy z", 60, "", 3}};
      const auto serial_out = train::generate(serial, tokenizer, greedy, requests, 3);
      const auto parallel_out = train::generate(parallel, tokenizer, greedy, requests, 3);
      for (size_t i = 0; i < requests.size(); ++i)
        EXPECT_EQ(parallel_out[i].text, serial_out[i].text) << where << " " << i;
      train::SampleOptions uncached{"the cat", 80, 0.0, 0, 1};
      uncached.kv_cache = false;
      EXPECT_EQ(parallel_out[0].text, train::sample_text(serial, tokenizer, uncached)) << where;

      EXPECT_LT(worst_decode_logits_difference(serial, parallel), bound) << where;
    }
  }
}

}  // namespace
}  // namespace loom::parallel::tp
