// Fuzz target: a tokenizer spec (as checkpoints store it) and text through it. The spec is a
// tokenizer or an error; text is encoded or refused with an error; and whatever it encodes
// decodes back to the same text.
#include <stdexcept>

#include "fuzz_target.hpp"
#include "loom/data/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return loom::fuzz::accept_or_loom_error(data, size, [](const std::string& input) {
    const size_t cut = input.find('\x01');
    const std::string spec = input.substr(0, cut), text = cut == std::string::npos ? "" : input.substr(cut + 1);
    const auto tokenizer = loom::data::Tokenizer::from_spec(spec);
    std::vector<int32_t> every;
    for (int32_t i = 0; i < tokenizer->vocab_size() && i < 256; ++i) every.push_back(i);
    const std::string alphabet = tokenizer->decode(every);
    for (const std::string& t : {alphabet, text}) {
      const std::vector<int32_t> ids = tokenizer->encode(t);
      if (tokenizer->decode(ids) != t) throw std::logic_error("decode(encode(text)) differs from the text");
    }
  });
}
