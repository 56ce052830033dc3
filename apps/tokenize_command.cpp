// `loom tokenize`: a text file into a token file (data/token_file.hpp) that `loom train
// --data` reads memory-mapped.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "commands.hpp"
#include "loom/data/token_file.hpp"
#include "loom/error.hpp"

namespace loom::apps {

namespace {
struct TokenizeArgs {
  std::string tokenizer = "char", tokenizer_dir, in, out;
};
}  // namespace

Runner add_tokenize_command(CLI::App& sub) {
  auto args = std::make_shared<TokenizeArgs>();
  sub.add_option("--tokenizer", args->tokenizer, "'char', 'byte' or 'gpt2'");
  sub.add_option("--tokenizer-dir", args->tokenizer_dir, "with --tokenizer gpt2: the directory of vocab.json and merges.txt");
  sub.add_option("IN", args->in, "UTF-8 text file")->required();
  sub.add_option("OUT", args->out, "token file to write")->required();
  return [args]() {
    check(args->tokenizer == "char" || args->tokenizer == "byte" || args->tokenizer == "gpt2",
          "--tokenizer must be 'char', 'byte' or 'gpt2', got '", args->tokenizer, "'");
    // The token file is written beside OUT and renamed over it at the end: that would replace
    // the text being read, or fail on a directory after the whole pass (leaving OUT.tmp).
    std::error_code ec;
    check(!std::filesystem::is_directory(args->out, ec), "OUT '", args->out,
          "' is a directory: name the token file to write");
    check(!std::filesystem::equivalent(args->in, args->out, ec), "OUT '", args->out, "' is the input text '",
          args->in, "' itself: writing the token file would replace it");
    const int64_t n = data::tokenize_text_file(args->in, args->out, args->tokenizer, args->tokenizer_dir);
    std::printf("wrote %s: %lld tokens (%s)\n", args->out.c_str(), static_cast<long long>(n), args->tokenizer.c_str());
    return 0;
  };
}

}  // namespace loom::apps
