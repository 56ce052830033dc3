// `loom eval`: a checkpoint's perplexity on a text file (nats per token, bits per byte).
#include <cmath>
#include <cstdio>
#include <memory>

#include "commands.hpp"
#include "loom/data/text_dataset.hpp"
#include "loom/kernels/threads.hpp"
#include "loom/train/inference_model.hpp"
#include "loom/train/perplexity.hpp"

namespace loom::apps {

namespace {
struct EvalArgs {
  std::string checkpoint, data;
  int64_t batch = 8;
  int threads = 0;
};
}  // namespace

Runner add_eval_command(CLI::App& sub) {
  auto args = std::make_shared<EvalArgs>();
  sub.add_option("--checkpoint", args->checkpoint, "checkpoint file or run directory (uses its latest)")->required();
  sub.add_option("--data", args->data, "UTF-8 text file to score")->required();
  sub.add_option("--batch", args->batch, "windows of block_size tokens per forward pass");
  sub.add_option("--threads", args->threads, "compute threads; 0 = all cores");
  return [args]() {
    kernels::set_num_threads(args->threads);
    const std::string text = data::read_text_file(args->data);
    train::InferenceModel m = train::load_inference_model(args->checkpoint, nullptr);
    const train::Perplexity p = train::evaluate_perplexity(*m.model, *m.tokenizer, text, args->batch);
    std::printf("%s: %lld tokens, %lld bytes: %.6f nats/token (perplexity %.4f), %.6f bits/byte\n", args->data.c_str(),
                static_cast<long long>(p.tokens), static_cast<long long>(p.bytes), p.nats_per_token,
                std::exp(p.nats_per_token), p.bits_per_byte);
    return 0;
  };
}

}  // namespace loom::apps
