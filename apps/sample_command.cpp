// `loom sample`: rebuild the model from a checkpoint's own configuration and generate.
#include <cstdio>
#include <memory>

#include "commands.hpp"
#include "loom/data/tokenizer.hpp"
#include "loom/kernels/threads.hpp"
#include "loom/train/checkpoint.hpp"
#include "loom/train/config.hpp"
#include "loom/train/memory_budget.hpp"
#include "loom/train/sampler.hpp"

namespace loom::apps {

namespace {
struct SampleArgs {
  std::string checkpoint;
  train::SampleOptions options;
  int threads = 0;
};
}  // namespace

Runner add_sample_command(CLI::App& sub) {
  auto args = std::make_shared<SampleArgs>();
  sub.add_option("--checkpoint", args->checkpoint, "checkpoint file or run directory (uses its latest)")->required();
  sub.add_option("--prompt", args->options.prompt, "text to continue");
  sub.add_option("--tokens", args->options.tokens,
                 "tokens to generate (at most " + std::to_string(train::kMaxSampleTokens) + ")");
  sub.add_option("--temperature", args->options.temperature, "softmax temperature; 0 = greedy");
  sub.add_option("--top-k", args->options.top_k, "sample among the k most likely tokens; 0 = all");
  sub.add_option("--seed", args->options.seed, "sampling seed");
  sub.add_option("--threads", args->threads, "compute threads; 0 = all cores");
  return [args]() {
    args->options.validate();
    kernels::set_num_threads(args->threads);
    const std::string path = train::resolve_checkpoint_path(args->checkpoint);
    const train::CheckpointInfo info = train::read_checkpoint_info(path);
    train::TrainConfig config;
    train::apply_toml_string(config, info.config_toml, path + " (stored configuration)");
    std::unique_ptr<data::Tokenizer> tokenizer = data::Tokenizer::from_spec(info.tokenizer_spec);
    config.model.vocab_size = tokenizer->vocab_size();
    config.model.validate();
    // The stored configuration is input like any other: bounded before the model is built.
    train::check_fits_in_memory(train::inference_memory(config.model), 1, "the model of checkpoint '" + path + "'");
    nn::GPT model(config.model, 0);
    train::load_checkpoint(path, model, nullptr, "");
    std::printf("%s\n", train::sample_text(model, *tokenizer, args->options).c_str());
    return 0;
  };
}

}  // namespace loom::apps
