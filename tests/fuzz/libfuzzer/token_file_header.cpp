// Fuzz target: a token file (`loom tokenize` output) as `loom train --data` maps it: header,
// tokenizer spec and every id checked against the spec's vocabulary. The input is written to
// a scratch file first (the reader maps a path); anything but a loom::Error fails.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "fuzz_target.hpp"
#include "loom/data/token_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // This process's scratch file, removed at exit.
  static const struct Scratch {
    std::string path =
        std::filesystem::temp_directory_path() / ("loom_fuzz_tokens_" + std::to_string(::getpid()) + ".bin");
    ~Scratch() { std::filesystem::remove(path); }
  } scratch;
  const std::string& path = scratch.path;
  return loom::fuzz::accept_or_loom_error(data, size, [&](const std::string& input) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << input;
    (void)loom::data::is_token_file(path);
    const loom::data::TokenFile file(path);
    const auto tokenizer = loom::data::Tokenizer::from_spec(file.tokenizer_spec());
    std::vector<int32_t> ids(static_cast<size_t>(file.size()));
    file.copy(0, file.size(), ids.data(), tokenizer->vocab_size());
  });
}
