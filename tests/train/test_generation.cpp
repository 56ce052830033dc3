// Generation with the KV cache against the uncached reference (the whole context re-run for
// every token): greedy tokens identical for 200 tokens and every step's logits within 1e-5
// relative (fp32: the cached path sums attention and the decode GEMV in another order, a few
// ulps of the largest logit); the window sliding past block_size; batched generation of
// prompts of different lengths (continuous batching, a stop text) equal to each alone; top-p;
// bad requests and prompts files are errors naming the problem; a generator run dry hands the
// allocator's cached blocks back.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include "loom/error.hpp"
#include "loom/kernels/gemv.hpp"
#include "loom/kernels/matmul.hpp"
#include "loom/kernels/packed_weights.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/nn/cached_forward.hpp"
#include "loom/nn/gemm_input.hpp"
#include "loom/tensor/allocator.hpp"
#include "loom/train/generation_requests.hpp"
#include "loom/train/memory_budget.hpp"
#include "loom/train/sampler.hpp"
#include "test_util.hpp"

namespace loom::train {
namespace {

using loom::testing::relative_error;

// Weights scaled up (x4) from the GPT-2 init so the logits are far from ties: greedy decoding then
// does not flip on rounding, and a mismatch means a real difference.
struct Model {
  data::CharTokenizer tokenizer = data::CharTokenizer::from_text("abcdefghijklmnopqrstuvwxyz .,\n");
  nn::GPT model;
  explicit Model(int64_t block_size, int64_t n_layer = 2)
      : model({.vocab_size = 30, .block_size = block_size, .n_layer = n_layer, .n_head = 2, .n_embd = 16}, 5) {
    for (nn::Parameter* p : model.parameters())
      for (int64_t i = 0; i < p->value().numel(); ++i) p->value().f32()[i] *= 4.0f;
  }
};

TEST(Generation, NonFiniteLogitsAreAnErrorNotAToken) {
  // A diverged model's logits: greedy would pick token 0 and sampling an arbitrary one, and
  // the "text" would look generated. Either way it is refused, naming what happened.
  const std::vector<float> logits{0.5f, NAN, 1.0f};
  std::mt19937_64 rng(1);
  for (double temperature : {0.0, 1.0}) {
    SamplingOptions o;
    o.temperature = temperature;
    EXPECT_EQ(testing::error_of([&] { pick_token(logits.data(), 3, o, rng); }),
              "the model's logits are not finite (nan for token 1): its weights diverged; sample from an earlier "
              "checkpoint");
  }
}

TEST(Generation, CachedGreedyEqualsUncachedFor200TokensLogitsWithin1e5) {
  Model m(/*block_size=*/256);
  const SampleOptions o{"the cat", 200, 0.0, 0, 1};
  SampleOptions uncached = o;
  uncached.kv_cache = false;
  const std::string reference = sample_text(m.model, m.tokenizer, uncached);
  EXPECT_EQ(sample_text(m.model, m.tokenizer, o), reference);

  // Every step's logits: the cached decode fed the reference's tokens against a full forward.
  const std::vector<int32_t> ids = m.tokenizer.encode(reference);
  const int64_t prompt = 7, V = 30, Vp = m.model.config().resolved_padded_vocab();
  nn::KVCache cache(m.model, 1);
  Tensor cached = nn::forward_cached(m.model, cache, {ids.begin(), ids.begin() + prompt},
                                     std::vector<int64_t>(prompt, 0), {prompt - 1});
  double worst = 0.0;
  for (int64_t n = prompt; n <= static_cast<int64_t>(ids.size()); ++n) {
    Tensor idx = Tensor::empty({1, n}, DType::I32);
    std::copy(ids.begin(), ids.begin() + n, idx.i32());
    nn::Context ctx;
    const Tensor full = m.model.forward(idx, ctx);  // (1, n, Vp)
    worst = std::max(worst, relative_error(cached.f32(), full.f32() + (n - 1) * Vp, V));
    if (n < static_cast<int64_t>(ids.size())) cached = nn::forward_cached(m.model, cache, {ids[n]}, {0}, {0});
  }
  EXPECT_LT(worst, 1e-5);
  RecordProperty("worst_relative_logit_error", std::to_string(worst));
}

// Every step's logits of the cached decode fed `ids` (a prompt of `prompt` tokens, then
// the rest one at a time) against a full forward over the same tokens: the largest error
// relative to the largest logit, of the cached path against `full` (the same precision) and
// against `fp32` (the full forward in fp32).
struct LogitErrors {
  double vs_full = 0.0, vs_fp32 = 0.0;
};
LogitErrors cached_logit_errors(nn::GPT& model, const std::vector<int32_t>& ids, int64_t prompt) {
  const int64_t V = model.config().vocab_size, Vp = model.config().resolved_padded_vocab();
  auto full_last = [&](int64_t n, kernels::Precision precision) {
    const kernels::PrecisionScope scope(precision);
    Tensor idx = Tensor::empty({1, n}, DType::I32);
    std::copy(ids.begin(), ids.begin() + n, idx.i32());
    nn::Context ctx;
    const Tensor full = model.forward(idx, ctx);  // (1, n, Vp)
    return std::vector<float>(full.f32() + (n - 1) * Vp, full.f32() + (n - 1) * Vp + V);
  };
  const kernels::Precision precision = kernels::compute_precision();
  nn::KVCache cache(model, 1);
  Tensor cached = nn::forward_cached(model, cache, {ids.begin(), ids.begin() + prompt}, std::vector<int64_t>(prompt, 0),
                                     {prompt - 1});
  LogitErrors e;
  for (int64_t n = prompt; n <= static_cast<int64_t>(ids.size()); ++n) {
    e.vs_full = std::max(e.vs_full, relative_error(cached.f32(), full_last(n, precision).data(), V));
    e.vs_fp32 = std::max(e.vs_fp32, relative_error(cached.f32(), full_last(n, kernels::Precision::F32).data(), V));
    if (n < static_cast<int64_t>(ids.size())) cached = nn::forward_cached(model, cache, {ids[n]}, {0}, {0});
  }
  return e;
}

// bf16 weights (the decode GEMV and prefill read the bf16 copies): cached equals uncached in
// bf16 for 200 greedy tokens, and the logits stay near fp32's. Both paths round the same
// operands to bf16 (the projections' inputs and weights, q, k, v and the attention weights)
// and multiply them exactly, so they differ only in the order of fp32 sums. A last-bit
// difference in a sum can move an operand of a later GEMM across a bf16 rounding boundary, a
// change of 2^-8 (3.9e-3) of that value, and a few such flips add up: measured 7.5e-8 of the
// largest logit over the first 64 steps with AMX kernels, 4.1e-3 with oneDNN's AVX512-BF16
// ones (another summation order, one flip's worth); bounded at 1.2e-2 (three flips). A
// wrong cached key or position gives the logits of another context instead. Against fp32
// (2 layers, weights x4) measured 2.2e-2, bounded at 4e-2; the x4 weights keep the top two
// logits further apart than that, so the greedy tokens equal fp32's too.
TEST(Generation, Bf16CachedEqualsUncachedFor200TokensNearFp32) {
  Model m(/*block_size=*/256);
  const SampleOptions o{"the cat", 200, 0.0, 0, 1};
  const std::string fp32 = sample_text(m.model, m.tokenizer, o);
  const kernels::PrecisionScope bf16(kernels::Precision::BF16);
  SampleOptions uncached = o;
  uncached.kv_cache = false;
  const std::string reference = sample_text(m.model, m.tokenizer, uncached);
  EXPECT_EQ(sample_text(m.model, m.tokenizer, o), reference);
  EXPECT_EQ(reference, fp32);
  const std::vector<int32_t> ids = m.tokenizer.encode(reference);
  const LogitErrors e = cached_logit_errors(m.model, {ids.begin(), ids.begin() + 7 + 64}, 7);
  EXPECT_LT(e.vs_full, 1.2e-2);
  EXPECT_LT(e.vs_fp32, 4e-2);
  RecordProperty("worst_relative_logit_error_vs_uncached", std::to_string(e.vs_full));
  RecordProperty("worst_relative_logit_error_vs_fp32", std::to_string(e.vs_fp32));
}

// bf16 decoding keeps its KV cache in bf16: the attention reads keys and values rounded to
// bf16 either way, so a bf16 cache gives the very logits of an fp32 cache holding the rounded
// values (bit for bit, prefill and batched decode across slots), in half the bytes. fp32
// decoding gets an fp32 cache and refuses a bf16 one.
TEST(Generation, Bf16KvCacheHalvesTheBytesWithTheSameLogits) {
  Model m(/*block_size=*/32);
  const int64_t slots = 3;
  auto decode = [&](nn::KVCache& cache) {
    std::vector<float> logits;
    for (int64_t s = 0; s < slots; ++s) {  // prompts of different lengths, one per slot
      const std::vector<int32_t> prompt(static_cast<size_t>(2 * s + 1), static_cast<int32_t>(7 * s + 1));
      const Tensor out = nn::forward_cached(m.model, cache, prompt, std::vector<int64_t>(prompt.size(), s),
                                            {static_cast<int64_t>(prompt.size()) - 1});
      logits.insert(logits.end(), out.f32(), out.f32() + out.numel());
    }
    std::vector<int32_t> step = {1, 2, 3};
    for (int n = 0; n < 10; ++n) {
      const Tensor out = nn::forward_cached(m.model, cache, step, {0, 1, 2}, {0, 1, 2});
      logits.insert(logits.end(), out.f32(), out.f32() + out.numel());
      for (int32_t& t : step) t = (t * 5 + n) % 30;
    }
    return logits;
  };
  {
    const kernels::PrecisionScope bf16(kernels::Precision::BF16);
    nn::KVCache half(m.model, slots), widened(m.model, slots, DType::F32);
    EXPECT_EQ(half.dtype(), DType::BF16);
    EXPECT_EQ(half.keys(0).nbytes() * 2, widened.keys(0).nbytes());
    EXPECT_EQ(half.bytes_read(10) * 2, widened.bytes_read(10));
    EXPECT_EQ(static_cast<double>(half.bytes_read(32)) * slots, kv_cache_bytes(m.model.config(), slots, /*bf16=*/true));
    const std::vector<float> from_half = decode(half), from_widened = decode(widened);
    ASSERT_EQ(from_half.size(), from_widened.size());
    EXPECT_EQ(0, std::memcmp(from_half.data(), from_widened.data(), from_half.size() * sizeof(float)));
  }
  nn::KVCache fp32(m.model, 1);
  EXPECT_EQ(fp32.dtype(), DType::F32);
  nn::KVCache stale(m.model, 1, DType::BF16);
  EXPECT_NE(loom::testing::error_of([&] { nn::forward_cached(m.model, stale, {1}, {0}, {0}); })
                .find("fp32 decoding needs an fp32 cache"),
            std::string::npos);
  EXPECT_EQ(stale.length(0), 0);  // refused before a position was taken
}

// A decode step of more sequences than the GEMV takes reads oneDNN-packed weight copies when
// given them: the same greedy tokens and logits as oneDNN on the plain weights, within 1e-5
// relative in fp32 (the packed kernel sums in another order: a few ulps) and 1e-3 in bf16 (the
// same bf16 operands; a last-bit difference may move one activation across a bf16 rounding
// boundary, 2^-8 of it). After the weights change (a new weights generation) the copies are
// packed again, never stale.
TEST(Generation, PackedDecodeEqualsPlainWeights) {
  Model m(/*block_size=*/64);
  const int64_t B = kernels::kGemvMaxRows + 3, V = 30;
  auto run = [&](kernels::PackedWeights* packed, std::vector<int32_t>& tokens) {
    nn::KVCache cache(m.model, B);
    std::vector<int64_t> slots(static_cast<size_t>(B)), rows(static_cast<size_t>(B));
    std::vector<float> logits;
    for (int64_t s = 0; s < B; ++s) {
      slots[s] = rows[s] = s;
      const std::vector<int32_t> prompt(static_cast<size_t>(s + 1), static_cast<int32_t>(3 * s % V));
      nn::forward_cached(m.model, cache, prompt, std::vector<int64_t>(prompt.size(), s), {s});
    }
    std::vector<int32_t> step(static_cast<size_t>(B), 1);
    for (int n = 0; n < 12; ++n) {
      const Tensor out = nn::forward_cached(m.model, cache, step, slots, rows, packed);  // (B, V)
      logits.insert(logits.end(), out.f32(), out.f32() + B * V);
      for (int64_t s = 0; s < B; ++s) {
        const float* row = out.f32() + s * V;
        step[s] = static_cast<int32_t>(std::max_element(row, row + V) - row);  // greedy
      }
      tokens.insert(tokens.end(), step.begin(), step.end());
    }
    return logits;
  };
  for (const auto& [precision, bound] :
       {std::pair{kernels::Precision::F32, 1e-5}, std::pair{kernels::Precision::BF16, 1e-3}}) {
    const kernels::PrecisionScope scope(precision);
    kernels::PackedWeights packed;
    for (int round = 0; round < 2; ++round) {
      if (round == 1) {  // new weights: what an optimizer step does
        for (nn::Parameter* p : m.model.parameters())
          for (int64_t i = 0; i < p->value().numel(); ++i) p->value().f32()[i] *= 0.9f;
        kernels::new_weights_generation();
      }
      std::vector<int32_t> plain_tokens, packed_tokens;
      const std::vector<float> plain = run(nullptr, plain_tokens);
      const std::vector<float> with_packed = run(&packed, packed_tokens);
      EXPECT_EQ(packed_tokens, plain_tokens) << "round " << round;
      const double error = relative_error(with_packed.data(), plain.data(), static_cast<int64_t>(plain.size()));
      EXPECT_LT(error, bound) << "round " << round;
      const std::string name = precision == kernels::Precision::F32 ? "fp32" : "bf16";
      RecordProperty("relative_logit_error_" + name + "_round" + std::to_string(round), std::to_string(error));
    }
    EXPECT_EQ(packed.copies(), 2 * 4 + 1);  // per block qkv, proj, fc, fc-proj; the head
    EXPECT_GT(packed.bytes(), 0);
  }
}

TEST(Generation, WindowSlidesPastBlockSizeAsTheUncachedSamplerDoes) {
  Model m(/*block_size=*/16);
  for (const double temperature : {0.0, 1.0}) {
    SampleOptions o{"abc", 40, temperature, 0, 3};
    SampleOptions uncached = o;
    uncached.kv_cache = false;
    EXPECT_EQ(sample_text(m.model, m.tokenizer, o), sample_text(m.model, m.tokenizer, uncached)) << temperature;
  }
}

TEST(Generation, BatchedPromptsOfDifferentLengthsEqualEachAlone) {
  Model m(/*block_size=*/32);
  std::vector<GenerationRequest> requests = {
      {"a", 25, "", 11}, {"hello there", 40, "", 12}, {"xyz.", 3, "", 13}, {"a much longer prompt", 30, "e", 14},
      {"q", 0, "", 15},  {"bb", 50, "", 16}};
  const SamplingOptions sampling{1.0, 10, 0.9};
  for (const int64_t batch : {6, 4, 2}) {
    const std::vector<Generated> together = generate(m.model, m.tokenizer, sampling, requests, batch);
    ASSERT_EQ(together.size(), requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      const Generated alone = generate(m.model, m.tokenizer, sampling, {requests[i]}, 1).front();
      EXPECT_EQ(together[i].text, alone.text) << "request " << i << ", batch " << batch;
      EXPECT_EQ(together[i].finish, alone.finish) << i;
      EXPECT_EQ(together[i].id, static_cast<int64_t>(i));
    }
  }
  const std::vector<Generated> out = generate(m.model, m.tokenizer, sampling, requests, 3);
  EXPECT_EQ(out[0].tokens.size(), 25u);
  EXPECT_EQ(out[4].tokens.size(), 0u);
  EXPECT_EQ(out[4].text, "q");
  // The stop text ends the sequence (unless the budget ran out first) and ends its text.
  if (out[3].finish == "stop") {
    EXPECT_EQ(out[3].text.back(), 'e');
    EXPECT_LT(out[3].tokens.size(), 30u);
  }
}

// A long-running generator meets a new prompt length with every request, and each prefill
// leaves the tensor allocator blocks of its own sizes (those of 1 MiB and more are cached):
// run dry, the generator hands them back, so an idle `loom generate` holds none of them.
TEST(Generation, RunDryTheGeneratorReleasesTheCachedBlocks) {
  const data::CharTokenizer tokenizer = data::CharTokenizer::from_text("ab");
  nn::GPT model({.vocab_size = 2, .block_size = 512, .n_layer = 1, .n_head = 2, .n_embd = 256}, 5);
  release_cached_blocks();
  Generator generator(model, tokenizer, SamplingOptions{1.0, 0, 1.0}, 2);
  // 500 tokens: the MLP's (T, 4C) fp32 hidden values are 2 MB, cached once freed.
  generator.add({std::string(500, 'a'), 3, "", 1}, 0);
  generator.add({std::string(400, 'b'), 6, "", 2}, 1);
  ASSERT_GT(cached_block_bytes(), 0) << "the prefills freed no block of 1 MiB or more: nothing to release";
  std::vector<Generated> done;
  while (!generator.empty()) {
    for (Generated& g : generator.step()) done.push_back(std::move(g));
    // One sequence still decoding keeps the cache: its next steps may reuse the blocks.
    if (!generator.empty() && done.size() == 1) {
      EXPECT_GT(cached_block_bytes(), 0);
    }
  }
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(cached_block_bytes(), 0);
}

// Every prefill has its prompt's length as the row count of its projections: where this CPU's
// fixed-shape kernel is oneDNN's run-time one anyway (no blocked weights: AVX2's gemm), one
// primitive per projection takes every length, so hundreds of prompt lengths no longer fill the
// primitive cache (~2 MB of JIT code each at width 768); on AVX-512 the fixed-shape brgemm,
// faster, stays. Both ways the prompts' next tokens are the uncached forward's.
TEST(Generation, PrefillsOfNewLengthsShareTheirProjectionsPrimitives) {
  for (const bool bf16 : {false, true})
    EXPECT_EQ(nn::prefill_rows(bf16, kernels::Varying::None),
              kernels::matmul_reads_blocked_weights(bf16) ? kernels::Varying::None : kernels::Varying::Rows);
  const data::CharTokenizer tokenizer = data::CharTokenizer::from_text("abc");
  nn::GPT model({.vocab_size = 3, .block_size = 128, .n_layer = 1, .n_head = 2, .n_embd = 48}, 11);
  const SamplingOptions greedy{0.0, 0, 1.0};
  const auto prompt = [](int64_t n) {
    std::string p;
    for (int64_t i = 0; i < n; ++i) p += "abc"[(i * 7 + i / 3) % 3];
    return p;
  };
  generate(model, tokenizer, greedy, {{prompt(71), 1, "", 1}}, 1);  // this model's first prefill
  const int64_t Vp = model.config().resolved_padded_vocab();
  int64_t created = 0;  // primitives the prefills of new lengths made
  for (const int64_t n : {73, 89, 97, 101, 113}) {  // lengths no other prefill of this test had
    const int64_t before = kernels::matmul_primitive_count();
    const std::vector<Generated> out = generate(model, tokenizer, greedy, {{prompt(n), 1, "", 1}}, 1);
    created += kernels::matmul_primitive_count() - before;
    ASSERT_EQ(out.size(), 1u);
    // The uncached forward's greedy token after the prompt (its logits (1, n, Vp), 3 of them real).
    const std::vector<int32_t> ids = tokenizer.encode(prompt(n));
    Tensor idx = Tensor::empty({1, n}, DType::I32);
    std::copy(ids.begin(), ids.end(), idx.i32());
    nn::Context ctx;
    const Tensor logits = model.forward(idx, ctx);
    const float* last = logits.f32() + (n - 1) * Vp;
    EXPECT_EQ(out[0].tokens.at(0), static_cast<int>(std::max_element(last, last + 3) - last)) << "prompt of " << n;
  }
  if (nn::prefill_rows(false, kernels::Varying::None) == kernels::Varying::Rows) {
    EXPECT_EQ(created, 0) << "new prompt lengths made new primitives";
  }
}

TEST(Generation, TopPKeepsTheNucleus) {
  const float logits[4] = {2.0f, 1.0f, 0.5f, -3.0f};
  std::mt19937_64 rng(1);
  // p(0) = 0.61: a nucleus of 0.5 is token 0 alone.
  for (int i = 0; i < 50; ++i) EXPECT_EQ(pick_token(logits, 4, {1.0, 0, 0.5}, rng), 0);
  std::vector<int> seen(4, 0);
  for (int i = 0; i < 400; ++i) ++seen[static_cast<size_t>(pick_token(logits, 4, {1.0, 0, 0.85}, rng))];
  EXPECT_GT(seen[1], 0);
  EXPECT_EQ(seen[2] + seen[3], 0);  // 0.61 + 0.22 < 0.85 needs token 2, never token 3
  EXPECT_THROW(SamplingOptions({1.0, 0, 0.0}).validate(), Error);
  EXPECT_THROW(SamplingOptions({1.0, 0, 1.5}).validate(), Error);
}

void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << part;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Generation, BadPromptsAreErrors) {
  Model m(/*block_size=*/16, /*n_layer=*/1);
  const SamplingOptions greedy{0.0, 0, 1.0};
  expect_error([&] { generate(m.model, m.tokenizer, greedy, {{"", 5, "", 1}}, 1); }, "the prompt must not be empty");
  expect_error([&] { generate(m.model, m.tokenizer, greedy, {{std::string(17, 'a'), 5, "", 1}}, 1); },
               "the prompt is 17 tokens, longer than the model's context of 16 tokens");
  expect_error([&] { generate(m.model, m.tokenizer, greedy, {{"a", -1, "", 1}}, 1); }, "tokens must be between 0");
  Generator g(m.model, m.tokenizer, greedy, 1);
  g.add({"ab", 5, "", 1}, 0);
  expect_error([&] { g.add({"cd", 5, "", 1}, 1); }, "batch is full");
}

TEST(Generation, PromptsFileLinesAndErrors) {
  const auto dir = loom::testing::fresh_temp_dir("prompts_file");
  auto write = [&](const std::string& text) {
    const std::string path = (dir / "p.txt").string();
    std::ofstream(path) << text;
    return path;
  };
  const GenerationRequest defaults{"", 20, "\n", 7};
  const auto requests =
      read_prompts_file(write("plain text\n\n{\"prompt\": \"json\", \"tokens\": 3, \"seed\": 99, \"stop\": \"x\"}\r\nthird\n"),
                        defaults);
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[0].prompt, "plain text");
  EXPECT_EQ(requests[0].seed, 7u);
  EXPECT_EQ(requests[0].stop, "\n");
  EXPECT_EQ(requests[1].prompt, "json");
  EXPECT_EQ(requests[1].max_tokens, 3);
  EXPECT_EQ(requests[1].seed, 99u);
  EXPECT_EQ(requests[1].stop, "x");
  EXPECT_EQ(requests[2].seed, 9u);  // request 2: seed + 2
  expect_error([&] { read_prompts_file(write("\n  \n"), defaults); }, "holds no prompt");
  expect_error([&] { read_prompts_file(write("ok\n{\"prompt\": \"a\",}\n"), defaults); }, "line 2: invalid JSON");
  expect_error([&] { read_prompts_file(write("{\"prompt\": \"a\", \"tokenz\": 3}"), defaults); },
               "line 1: unknown key \"tokenz\"");
  expect_error([&] { read_prompts_file(write("{\"tokens\": 3}"), defaults); }, "line 1: the request has no \"prompt\"");
  expect_error([&] { read_prompts_file(write("{\"prompt\": \"\"}"), defaults); }, "the prompt must not be empty");
  expect_error([&] { read_prompts_file(write("{\"prompt\": \"a\", \"tokens\": -4}"), defaults); }, "tokens must be between");
  expect_error([&] { read_prompts_file(write("{\"prompt\": 5}"), defaults); }, "\"prompt\" must be a string");
  expect_error([&] { read_prompts_file((dir / "missing.txt").string(), defaults); }, "missing.txt");
  expect_error([&] { read_prompts_file(dir.string(), defaults); }, "is a directory");
}

TEST(Generation, RequestLinesIndentedRepeatedAndBlank) {
  const GenerationRequest defaults{"", 20, "", 7};
  // An indented object is JSON (it was taken as a prompt of braces); plain text keeps its spaces.
  auto parse = [&](const std::string& line) { return parse_request_line(line, defaults, 4, "request 4"); };
  const GenerationRequest json = parse(" \t{\"prompt\": \"ab\", \"tokens\": 3} ");
  EXPECT_EQ(json.prompt, "ab");
  EXPECT_EQ(json.max_tokens, 3);
  EXPECT_EQ(parse("  ab").prompt, "  ab");
  // A repeated key is refused (nlohmann keeps its last value unsaid); a nested one is not the request's.
  EXPECT_EQ(testing::error_of([&] { parse(R"({"prompt": "a", "tokens": 1, "tokens": 9000})"); }),
            "request 4: the key \"tokens\" is given twice");
  EXPECT_EQ(testing::error_of([&] { parse(R"({"prompt": "a", "stop": {"x": 1, "x": 2}})"); }),
            "request 4: \"stop\" must be a string");
  // Blank lines, empty or only spaces, tabs and a CR, are no request and not numbered.
  for (const char* blank : {"", " ", "\t \t", " \r"}) EXPECT_TRUE(is_blank_request_line(blank)) << blank;
  EXPECT_FALSE(is_blank_request_line(" a"));
  const auto dir = loom::testing::fresh_temp_dir("request_lines");
  const std::string path = (dir / "p.txt").string();
  std::ofstream(path) << "a\n \n\t\n  {\"prompt\": \"b\"}\n";
  const auto requests = read_prompts_file(path, defaults);
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[1].prompt, "b");
  EXPECT_EQ(requests[1].seed, 8u);  // request 1: the blank lines were not counted
  // With the model's tokenizer and context, a prompt too long is named by its line before anything runs.
  const data::CharTokenizer tokenizer = data::CharTokenizer::from_text("ab");
  std::ofstream(path) << "ab\n" << std::string(17, 'a') << "\n";
  EXPECT_EQ(testing::error_of([&] { read_prompts_file(path, defaults, &tokenizer, 16); }),
            "prompts file '" + path + "' line 2: the prompt is 17 tokens, longer than the model's context of 16 tokens "
            "(block_size)");
}

}  // namespace
}  // namespace loom::train
