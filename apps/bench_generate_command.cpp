// `loom bench generate`: prefill and decode tokens/s of KV-cached generation at several batch
// sizes for the gpt-mini, gpt2-small and gpt-mini-moe shapes (the last gpt-mini with every MLP
// 8 experts, top-2; random weights and tokens), next to the bound memory bandwidth sets on
// decode (every weight and the batch's cached keys and values read once per step, over this
// machine's measured copy bandwidth; of a mixture's experts, those a step's tokens reach),
// the few-rows GEMV kernel against oneDNN at M = 1, and (--vs-uncached) the cached sampler
// against the uncached one (today's fp32 re-run of the whole context, the reference) on the
// same prompt. --precisions fp32,bf16: a row per precision (bf16: the weights read as their
// bf16 copies).
// JSON lines, one per (model, batch), for bench/generate_vs_pytorch.sh.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "commands.hpp"
#include "loom/error.hpp"
#include "loom/kernels/gemv.hpp"
#include "loom/kernels/matmul.hpp"
#include "loom/kernels/packed_weights.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/kernels/threads.hpp"
#include "loom/nn/cached_forward.hpp"
#include "loom/train/memory_budget.hpp"
#include "loom/train/sampler.hpp"
#include "timing.hpp"

namespace loom::apps {

namespace {

// Seconds this process has run on a CPU: on a machine shared with other jobs, a one-thread
// run's CPU time is the time it would take with a core of its own (wall time is printed too).
double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct GenerateBenchArgs {
  std::vector<std::string> models{"gpt-mini", "gpt2-small"};
  std::vector<int64_t> batches{1, 4, 16};
  std::vector<std::string> precisions{"fp32"};
  int64_t prompt_tokens = 64;
  int64_t new_tokens = 64;
  int threads = 0;
  std::vector<std::string> uncached_models;  // also time the uncached sampler on these
  int64_t uncached_tokens = 256;
  int64_t uncached_prompt_tokens = 1;
};

nn::GPTConfig shape_of(const std::string& name) {
  const nn::GPTConfig mini{.vocab_size = 65, .block_size = 256, .n_layer = 6, .n_head = 6, .n_embd = 384};
  if (name == "gpt-mini") return mini;
  if (name == "gpt2-small") return {.vocab_size = 50257, .block_size = 1024, .n_layer = 12, .n_head = 12, .n_embd = 768};
  if (name == "gpt-mini-moe") {  // dropless: the KV cache serves it
    nn::GPTConfig moe = mini;
    moe.moe = {.experts = 8, .top_k = 2};
    return moe;
  }
  fail("unknown model shape '", name, "' (expected gpt-mini, gpt2-small or gpt-mini-moe)");
}

// Bytes read plus written per second copying a buffer far larger than the caches (STREAM's
// "copy"), with the current threads; the best of a few runs. cpu: over CPU time (one thread).
double copy_bandwidth(bool cpu) {
  const int64_t n = int64_t{64} << 20;  // 256 MiB per buffer
  std::vector<float> a(static_cast<size_t>(n), 1.0f), b(static_cast<size_t>(n), 0.0f);
  double best = 0.0;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = Clock::now();
    const double c0 = cpu_seconds();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i += 16384) std::memcpy(&b[i], &a[i], sizeof(float) * 16384);
    const double s = cpu ? cpu_seconds() - c0 : seconds_since(t0);
    best = std::max(best, 2.0 * static_cast<double>(n) * sizeof(float) / s);
  }
  return best;
}

// GB/s of weight read by oneDNN's matmul and by the GEMV kernel at M = 1 on gpt2-small's LM
// head (154 MB: read from memory, not from a cache, as in a decode step).
template <class Now>
std::pair<double, double> gemv_vs_onednn(Now now) {
  const int64_t N = 50304, K = 768;
  std::vector<float> x(K, 0.1f), W(N * K, 0.01f), y(N);
  auto rate = [&](auto f) {
    f();
    std::vector<double> t;
    for (int r = 0; r < 5; ++r) {
      const double t0 = now();
      f();
      t.push_back(now() - t0);
    }
    return static_cast<double>(N * K * sizeof(float)) / median(t) / 1e9;
  };
  const double onednn = rate([&] { kernels::matmul(x.data(), kernels::Trans::N, W.data(), kernels::Trans::T, y.data(), 1, N, K); });
  const double gemv = rate([&] { kernels::gemv_rows(x.data(), W.data(), nullptr, y.data(), 1, N, K); });
  return {onednn, gemv};
}

int run(const GenerateBenchArgs& a) {
  kernels::set_num_threads(a.threads);
  // One thread: rates over CPU time (the machine may be shared); more: over wall time.
  const bool cpu = kernels::num_threads() == 1;
  const auto now = [cpu] { return cpu ? cpu_seconds() : std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); };
  const double bandwidth = copy_bandwidth(cpu);
  const auto [onednn_gbs, gemv_gbs] = gemv_vs_onednn(now);
  std::mt19937 rng(7);
  for (const std::string& name : a.models) {
    nn::GPTConfig cfg = shape_of(name);
    MemoryScope scope(MemoryCategory::Activations);
    nn::GPT model(cfg, 1);
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(cfg.vocab_size - 1));
    double uncached_rate = 0.0;  // today's sampler (fp32, no cache), timed once per model
    for (const std::string& precision : a.precisions) {
      const kernels::PrecisionScope scoped(kernels::parse_precision(precision));
      const bool bf16 = kernels::compute_precision() == kernels::Precision::BF16;
      // Every parameter is read once per decode step except the position table (one row);
      // in bf16 the matrices are read as their bf16 copies, the vectors (biases, norms) in fp32.
      // Experts are stacked (weights (E, out, in), biases (E, out)) and counted apart: a step
      // reads only the experts its tokens were routed to.
      double weight_bytes = 0.0, expert_bytes = 0.0;
      for (nn::Parameter* p : model.parameters()) {
        if (p->name().find("wpe") != std::string::npos) continue;
        const bool expert = p->name().find(".experts.") != std::string::npos;
        const bool matrix = p->value().ndim() == (expert ? 3 : 2);
        (expert ? expert_bytes : weight_bytes) += static_cast<double>(p->value().numel()) * (bf16 && matrix ? 2.0 : 4.0);
      }
      {
        // Untimed: the weights' bf16 copies are made on first use, and oneDNN's primitives.
        nn::KVCache warm(model, 1);
        nn::forward_cached(model, warm, std::vector<int32_t>(static_cast<size_t>(a.prompt_tokens), 0),
                           std::vector<int64_t>(static_cast<size_t>(a.prompt_tokens), 0), {0});
      }
      for (const int64_t B : a.batches) {
        nn::KVCache cache(model, B);
        const double t0 = now();
        for (int64_t s = 0; s < B; ++s) {
          std::vector<int32_t> prompt(static_cast<size_t>(a.prompt_tokens));
          for (int32_t& t : prompt) t = token(rng);
          nn::forward_cached(model, cache, prompt, std::vector<int64_t>(prompt.size(), s), {a.prompt_tokens - 1});
        }
        const double prefill_s = now() - t0;
        std::vector<int64_t> slots(static_cast<size_t>(B)), rows(static_cast<size_t>(B));
        for (int64_t s = 0; s < B; ++s) slots[s] = rows[s] = s;
        // The weights packed for oneDNN at this batch (kernels/packed_weights.hpp), as a
        // generator keeps them, made by one untimed step first.
        kernels::PackedWeights packed;
        std::vector<double> steps;
        for (int64_t n = B > kernels::kGemvMaxRows ? -1 : 0; n < a.new_tokens; ++n) {
          std::vector<int32_t> tokens(static_cast<size_t>(B));
          for (int32_t& t : tokens) t = token(rng);
          const double s0 = now();
          nn::forward_cached(model, cache, tokens, slots, rows, &packed);
          if (n >= 0) steps.push_back(now() - s0);
        }
        double decode_s = 0.0;
        for (double s : steps) decode_s += s;
        // The bound at the mean context of the decode steps. A mixture's B tokens, each routed to
        // K of E experts, reach E (1 - (1 - K / E)^B) of them on average when routing is uniform
        // (random weights route about so, as a balanced router does): exactly K at batch 1. Not
        // min(E, B K): at batch 4 of top-2 of 8 that counts 8 where about 5.5 are read.
        const int64_t mean_length = a.prompt_tokens + a.new_tokens / 2;
        const double E = static_cast<double>(cfg.moe.experts), K = static_cast<double>(cfg.moe.top_k);
        const double experts_read = cfg.moe.enabled() ? E * (1.0 - std::pow(1.0 - K / E, static_cast<double>(B))) : 0.0;
        const double step_bytes = weight_bytes + (cfg.moe.enabled() ? experts_read / E * expert_bytes : 0.0) +
                                  static_cast<double>(B * cache.bytes_read(mean_length));
        const double bound = static_cast<double>(B) * bandwidth / step_bytes;
        const double decode = static_cast<double>(B * a.new_tokens) / decode_s;
        nlohmann::json out = {{"impl", "loom"},
                              {"model", name},
                              {"precision", precision},
                              {"isa", kernels::cpu_isa_name()},
                              {"threads", kernels::num_threads()},
                              {"clock", cpu ? "cpu" : "wall"},
                              {"batch", B},
                              {"prompt_tokens", a.prompt_tokens},
                              {"new_tokens", a.new_tokens},
                              {"prefill_tokens_per_s", static_cast<double>(B * a.prompt_tokens) / prefill_s},
                              {"decode_tokens_per_s", decode},
                              {"decode_step_ms_median", 1e3 * median(steps)},
                              {"copy_bandwidth_gb_s", bandwidth / 1e9},
                              {"decode_bytes_per_step", step_bytes},
                              {"bandwidth_bound_tokens_per_s", bound},
                              {"fraction_of_bound", decode / bound},
                              {"gemv_m1_gb_s", gemv_gbs},
                              {"onednn_m1_gb_s", onednn_gbs}};
        if (cfg.moe.enabled()) out["moe_experts_read_per_block"] = experts_read;  // in the bound, of moe_experts
        if (B == 1 && std::count(a.uncached_models.begin(), a.uncached_models.end(), name) > 0) {
          // `loom sample` on the same prompt, cached (in this precision) and uncached (today's
          // fp32 sampler): the prompt's tokens through a tokenizer of vocab_size code points
          // from 'A', uncached_tokens greedy tokens.
          std::vector<char32_t> code_points(static_cast<size_t>(cfg.vocab_size));
          for (size_t i = 0; i < code_points.size(); ++i) code_points[i] = static_cast<char32_t>(U'A' + i);
          const data::CharTokenizer chars(code_points);
          std::vector<int32_t> prompt(static_cast<size_t>(a.uncached_prompt_tokens));
          for (int32_t& t : prompt) t = token(rng);
          train::SampleOptions o{chars.decode(prompt), a.uncached_tokens, 0.0, 0, 1};
          auto timed = [&](bool cached) {
            o.kv_cache = cached;
            const double s0 = now();
            train::sample_text(model, chars, o);
            return static_cast<double>(a.uncached_tokens) / (now() - s0);
          };
          const double cached = timed(true);
          if (uncached_rate == 0.0) {
            const kernels::PrecisionScope fp32(kernels::Precision::F32);
            uncached_rate = timed(false);
          }
          out["sample_prompt_tokens"] = a.uncached_prompt_tokens;
          out["sample_cached_tokens_per_s"] = cached;
          out["sample_uncached_fp32_tokens_per_s"] = uncached_rate;
          out["speedup_vs_uncached"] = cached / uncached_rate;
        }
        std::printf("%s\n", out.dump().c_str());
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

// Every option checked before anything is measured (the copy bandwidth alone reads 512 MiB
// for seconds): a value no row could use is an error, never a row left out or a rate of 0.
void validate(const GenerateBenchArgs& a) {
  kernels::check_thread_count(a.threads);
  for (const std::string& p : a.precisions) kernels::parse_precision(p);
  for (int64_t b : a.batches) check(b >= 1, "--batches must be >= 1, got ", b);
  check(a.prompt_tokens >= 1, "--prompt-tokens must be >= 1, got ", a.prompt_tokens);
  check(a.new_tokens >= 1, "--new-tokens must be >= 1, got ", a.new_tokens);
  const int64_t max_batch = *std::max_element(a.batches.begin(), a.batches.end());
  const bool bf16 = std::count(a.precisions.begin(), a.precisions.end(), "bf16") > 0;
  for (const std::string& name : a.models) {
    const nn::GPTConfig cfg = shape_of(name);
    check(a.prompt_tokens < cfg.block_size && a.new_tokens < cfg.block_size - a.prompt_tokens,
          "--prompt-tokens (", a.prompt_tokens, ") + --new-tokens (", a.new_tokens, ") must be below ", name,
          "'s context of ", cfg.block_size, " (one untimed decode step comes first)");
    train::check_fits_in_memory(train::inference_memory(cfg, max_batch, bf16), 1,
                                "bench generate's " + name + " at --batches " + std::to_string(max_batch),
                                {"loom bench generate", "--batches", "leave the largest shapes out of --models"});
  }
  if (a.uncached_models.empty()) return;
  for (const std::string& name : a.uncached_models) {
    check(std::count(a.models.begin(), a.models.end(), name) > 0, "--vs-uncached '", name,
          "' is not one of --models (the comparison is part of that model's batch-1 row)");
    const nn::GPTConfig cfg = shape_of(name);
    check(a.uncached_prompt_tokens >= 1 && a.uncached_prompt_tokens <= cfg.block_size,
          "--uncached-prompt-tokens must be between 1 and ", name, "'s context of ", cfg.block_size, ", got ",
          a.uncached_prompt_tokens);
  }
  check(std::count(a.batches.begin(), a.batches.end(), 1) > 0,
        "--vs-uncached times the batch-1 row, but --batches does not hold 1");
  // 0 tokens would time nothing and print a rate of 0.
  check(a.uncached_tokens >= 1 && a.uncached_tokens <= train::kMaxSampleTokens,
        "--uncached-tokens must be between 1 and ", train::kMaxSampleTokens, ", got ", a.uncached_tokens);
}

}  // namespace

void add_generate_bench(CLI::App& bench, Runner& runner) {
  auto args = std::make_shared<GenerateBenchArgs>();
  CLI::App* sub = bench.add_subcommand(
      "generate", "KV-cached prefill and decode tokens/s next to the memory-bandwidth bound, as JSON lines "
                  "(example: loom bench generate --models gpt2-small --batches 1,4,16 --threads 2)");
  sub->allow_extras();
  sub->add_option("--models", args->models, "model shapes: gpt-mini, gpt2-small, gpt-mini-moe (8 experts, top-2)")
      ->delimiter(',');
  sub->add_option("--batches", args->batches, "sequences decoded together")->delimiter(',');
  sub->add_option("--prompt-tokens", args->prompt_tokens, "prompt length (prefill) per sequence");
  sub->add_option("--new-tokens", args->new_tokens, "decode steps timed");
  sub->add_option("--threads", args->threads, "compute threads; 0 = all cores");
  sub->add_option("--vs-uncached", args->uncached_models,
                  "models (e.g. gpt-mini) whose batch-1 row also times `loom sample` cached and uncached")
      ->delimiter(',');
  const CLI::Option* uncached_tokens =
      sub->add_option("--uncached-tokens", args->uncached_tokens, "tokens both samplers generate for --vs-uncached");
  const CLI::Option* uncached_prompt =
      sub->add_option("--uncached-prompt-tokens", args->uncached_prompt_tokens, "their prompt's length in tokens");
  sub->add_option("--precisions", args->precisions, "fp32, bf16: a row per precision")->delimiter(',');
  runner = [args, sub, uncached_tokens, uncached_prompt]() {
    reject_unknown_flags(*sub);
    check(!args->uncached_models.empty() || (uncached_tokens->count() == 0 && uncached_prompt->count() == 0),
          "--uncached-tokens and --uncached-prompt-tokens set up the --vs-uncached comparison: name its models "
          "(--vs-uncached gpt-mini)");
    validate(*args);
    return run(*args);
  };
}

}  // namespace loom::apps
