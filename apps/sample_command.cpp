// `loom sample`: rebuild the model from a checkpoint's own configuration and generate, with
// the KV cache: one prompt (printed as text) or a prompts file (one JSON line per result,
// in file order), serially or tensor-parallel (mpirun -np T loom sample --tp T).
#include <charconv>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "loom/error.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/kernels/threads.hpp"
#include "loom/train/generation_requests.hpp"
#include "loom/train/inference_model.hpp"
#include "loom/train/sampler.hpp"

namespace loom::apps {

namespace {
struct SampleArgs {
  std::string checkpoint;
  train::SampleOptions options;
  std::string prompts_file;
  std::string stop;
  int64_t batch = 16;
  int threads = 0;
  int tp = 1;
  bool no_kv_cache = false;
  std::string precision = "fp32";
};

void sample_on(comm::ProcessGroup* tp, const SampleArgs& a) {
  const bool batched = !a.prompts_file.empty();  // one prompt: --batch is refused
  train::InferenceModel m =
      train::load_inference_model(a.checkpoint, tp, batched ? a.batch : 1, {"loom sample", batched ? "--batch" : "",
                                     "run it where more memory is free, or split it over more processes "
                                     "(`mpirun -np N loom sample --tp N`)"});
  const bool printer = tp == nullptr || tp->rank() == 0;
  if (a.prompts_file.empty()) {
    try {  // the tokenizer's message (a character, an offset) does not say it is the prompt's
      (void)m.tokenizer->encode(a.options.prompt);
    } catch (const Error& e) {
      fail("the prompt (--prompt): ", e.what());
    }
    std::string text;
    if (a.stop.empty()) {
      text = train::sample_text(*m.model, *m.tokenizer, a.options);
    } else {  // a stop text: the request as a prompts file's line would be, printed as text
      train::GenerationRequest request = a.options.request();
      request.stop = a.stop;
      MemoryScope scope(MemoryCategory::Activations);
      text = train::generate(*m.model, *m.tokenizer, a.options.sampling(), {request}, 1).at(0).text;
    }
    if (printer) std::printf("%s\n", text.c_str());
    return;
  }
  train::GenerationRequest defaults = a.options.request();
  defaults.stop = a.stop;
  const auto requests =
      train::read_prompts_file(a.prompts_file, defaults, m.tokenizer.get(), m.model->config().block_size);
  MemoryScope scope(MemoryCategory::Activations);
  for (const train::Generated& g : train::generate(*m.model, *m.tokenizer, a.options.sampling(), requests, a.batch))
    if (printer)
      std::printf("%s\n", generated_json(g).c_str());
}
}  // namespace

void add_sampling_flags(CLI::App& sub, train::SampleOptions& options) {
  sub.add_option("--temperature", options.temperature, "softmax temperature; 0 = greedy");
  sub.add_option("--top-k", options.top_k, "sample among the k most likely tokens; 0 = all");
  sub.add_option("--top-p", options.top_p, "sample among the most likely tokens holding this probability; 1 = all");
}

void add_precision_flag(CLI::App& sub, std::string& precision) {
  sub.add_option("--precision", precision, "fp32, or bf16: the weights' bf16 copies (half the bytes a decode step reads), "
                                           "fp32 accumulation");
}

void add_seed_flag(CLI::App& sub, uint64_t& seed, const std::string& help) {
  sub.add_option("--seed", seed, help)->check(CLI::Validator(
      [](std::string& text) -> std::string {
        uint64_t value = 0;
        const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (error == std::errc() && end == text.data() + text.size()) return "";
        return "must be an integer from 0 to 18446744073709551615 (2^64 - 1), got '" + text + "'";
      },
      "UINT64"));
}

void use_precision(const std::string& precision) {
  kernels::set_compute_precision(kernels::parse_precision(precision));
}

std::string generated_json(const train::Generated& g) {
  // Replace, not throw, on invalid UTF-8: a byte-level model may stop inside a character.
  return nlohmann::json{{"id", g.id}, {"text", g.text}, {"tokens", g.tokens.size()}, {"finish", g.finish}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Runner add_sample_command(CLI::App& sub) {
  auto args = std::make_shared<SampleArgs>();
  sub.add_option("--checkpoint", args->checkpoint, "checkpoint file or run directory (uses its latest)")->required();
  const CLI::Option* prompt = sub.add_option("--prompt", args->options.prompt, "text to continue");
  sub.add_option("--prompts-file", args->prompts_file,
                 "one request per line: text, or JSON {\"prompt\", \"tokens\", \"stop\", \"seed\"}; generated together");
  sub.add_option("--tokens", args->options.tokens,
                 "tokens to generate (at most " + std::to_string(train::kMaxSampleTokens) + ")");
  auto* stop = sub.add_option("--stop", args->stop, "end a sequence once its new text contains this");
  add_sampling_flags(sub, args->options);
  add_seed_flag(sub, args->options.seed, "sampling seed (request i of a prompts file: seed + i)");
  auto* batch = sub.add_option("--batch", args->batch, "prompts file: sequences decoded together");
  sub.add_option("--threads", args->threads, "compute threads; 0 = all cores");
  sub.add_option("--tp", args->tp, "tensor-parallel ranks (run under mpirun with this many processes)");
  add_precision_flag(sub, args->precision);
  sub.add_flag("--no-kv-cache", args->no_kv_cache, "re-run the whole context for every token (the reference path)");
  return [args, prompt, stop, batch]() {
    // The file's requests alone are generated: a --prompt beside it would be dropped unread.
    check(prompt->count() == 0 || args->prompts_file.empty(), "--prompt and --prompts-file (", args->prompts_file,
          ") are two sources of prompts: give one (a prompt is a line of the file)");
    check(batch->count() == 0 || !args->prompts_file.empty(), "--batch decodes a prompts file's requests together; "
          "one --prompt is one sequence");
    check(stop->count() == 0 || !args->no_kv_cache, "--stop needs the KV cache (drop --no-kv-cache)");
    args->options.kv_cache = !args->no_kv_cache;
    args->options.validate();
    check(args->batch >= 1, "--batch must be >= 1, got ", args->batch);
    check(args->tp >= 1, "--tp must be >= 1, got ", args->tp);
    check(args->prompts_file.empty() || args->options.kv_cache, "--prompts-file needs the KV cache (drop --no-kv-cache)");
    kernels::set_num_threads(args->threads);
    use_precision(args->precision);
    if (args->tp == 1 && !launched_by_mpi()) {
      sample_on(nullptr, *args);
      return 0;
    }
    check(launched_by_mpi(), "--tp ", args->tp, " needs ", args->tp, " processes: mpirun -np ", args->tp, " loom sample --tp ",
          args->tp, " ...");
    // sample has no config: LOOM_COMM_TIMEOUT, else the default. run_on_world sets the world's
    // timeout to this, so the variable must be read here, as train's config resolution reads it.
    const double timeout_s = comm::timeout_from_environment().value_or(train::TrainConfig{}.comm_timeout);
    return run_on_world([&](comm::ProcessGroup& world) {
      check(world.size() == args->tp, "loom sample --tp ", args->tp, " needs exactly ", args->tp,
            " ranks, the job has ", world.size(), " (give --tp ", world.size(),
            args->tp == 1 ? ", or run it without mpirun)" : ", or start it with mpirun -np " + std::to_string(args->tp) + ")");
      check(args->options.kv_cache || args->tp == 1, "--no-kv-cache runs on one process");
      sample_on(&world, *args);
    }, timeout_s);
  };
}

}  // namespace loom::apps
