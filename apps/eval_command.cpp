// `loom eval`: a checkpoint's perplexity on a text file or a token file (`loom tokenize`'s,
// made with the checkpoint's tokenizer) in nats per token and bits per byte.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "commands.hpp"
#include "loom/data/text_dataset.hpp"
#include "loom/data/token_file.hpp"
#include "loom/error.hpp"
#include "loom/kernels/threads.hpp"
#include "loom/train/inference_model.hpp"
#include "loom/train/perplexity.hpp"

namespace loom::apps {

namespace {
struct EvalArgs {
  std::string checkpoint, data;
  int64_t batch = 8;
  int threads = 0;
  std::string precision = "fp32";
};
}  // namespace

Runner add_eval_command(CLI::App& sub) {
  auto args = std::make_shared<EvalArgs>();
  sub.add_option("--checkpoint", args->checkpoint, "checkpoint file or run directory (uses its latest)")->required();
  sub.add_option("--data", args->data, "UTF-8 text file, or token file (loom tokenize), to score")->required();
  sub.add_option("--batch", args->batch, "windows of block_size tokens per forward pass");
  sub.add_option("--threads", args->threads, "compute threads; 0 = all cores");
  add_precision_flag(sub, args->precision);
  return [args]() {
    // Under a launcher of several ranks each would score the whole file and print it.
    const char* ranks = std::getenv("OMPI_COMM_WORLD_SIZE") ? std::getenv("OMPI_COMM_WORLD_SIZE") : std::getenv("PMI_SIZE");
    check(ranks == nullptr || std::string(ranks) == "1", "loom eval runs on one process, the job has ", ranks ? ranks : "",
          " ranks: run it without mpirun");
    kernels::set_num_threads(args->threads);
    use_precision(args->precision);
    check(args->batch >= 1, "--batch must be >= 1, got ", args->batch);
    train::InferenceModel m =
        train::load_inference_model(args->checkpoint, nullptr, args->batch,
                                    {"loom eval", "--batch"}, train::InferenceUse::Scoring);
    train::Perplexity p;
    if (data::is_token_file(args->data)) {
      const data::TokenFile file(args->data);
      const auto kind = [](const std::string& spec) { return spec.substr(0, spec.find(':')); };
      // A char tokenizer's alphabet is its own corpus's: `loom tokenize --tokenizer char` of any
      // other text makes another one, so the remedy there is the text itself.
      const std::string own = kind(m.tokenizer->spec());
      check(file.tokenizer_spec() == m.tokenizer->spec(), "token file '", args->data, "' was made with a ",
            kind(file.tokenizer_spec()), " tokenizer other than the checkpoint's ", own,
            " tokenizer: its ids mean other tokens (",
            own == "char" ? "give --data the text file itself: a char tokenizer is the alphabet of the text it was "
                            "built from, so tokenizing another text makes another one"
                          : "tokenize the text with `loom tokenize --tokenizer " + own +
                                "`, or give --data the text file itself",
            ")");
      std::vector<int32_t> ids(static_cast<size_t>(file.size()));
      file.copy(0, file.size(), ids.data(), m.tokenizer->vocab_size());
      p = train::evaluate_perplexity_of_tokens(*m.model, *m.tokenizer, ids, args->batch);
    } else {
      std::vector<int32_t> ids;
      try {
        ids = m.tokenizer->encode(data::read_text_file(args->data));
      } catch (const Error& e) {  // the tokenizer's message (a character, an offset) does not know the file
        const std::string what = e.what();
        if (what.find(args->data) != std::string::npos) throw;
        fail("data file '", args->data, "': ", what);
      }
      p = train::evaluate_perplexity_of_tokens(*m.model, *m.tokenizer, ids, args->batch);
    }
    check(std::isfinite(p.nats_per_token), "checkpoint '", args->checkpoint, "' scores '", args->data, "' at ",
          p.nats_per_token, " nats/token: its logits are not finite (weights that diverged)");
    std::printf("%s: %lld tokens, %lld bytes: %.6f nats/token (perplexity %.4f), %.6f bits/byte\n", args->data.c_str(),
                static_cast<long long>(p.tokens), static_cast<long long>(p.bytes), p.nats_per_token,
                std::exp(p.nats_per_token), p.bits_per_byte);
    return 0;
  };
}

}  // namespace loom::apps
