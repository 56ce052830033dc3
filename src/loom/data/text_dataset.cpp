#include "loom/data/text_dataset.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <new>
#include <sstream>

#include "loom/data/input_file.hpp"
#include "loom/error.hpp"
#include "loom/tensor/memory_tracker.hpp"

namespace loom::data {

namespace {
// SplitMix64: a counter-based generator, so any batch row can be drawn without the ones before it.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

std::string read_text_file(const std::string& path) {
  check_input_file(path, "data file", kMaxDataBytes);
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "cannot open data file '", path, "': ", std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  check(!in.bad(), "error reading data file '", path, "'");
  return ss.str();
}

TextDataset::TextDataset(const std::string& path, const std::string& tokenizer_kind, int64_t block_size,
                         double val_fraction, const std::string& tokenizer_files) {
  check(val_fraction > 0.0 && val_fraction < 1.0, "val_fraction must be in (0, 1), got ", val_fraction);
  if (is_token_file(path)) {
    token_file_ = std::make_unique<TokenFile>(path);
    tokenizer_ = Tokenizer::from_spec(token_file_->tokenizer_spec());
    n_total_ = token_file_->size();
  } else {
    try {
      const std::string text = read_text_file(path);
      check(!text.empty(), "data file '", path, "' is empty");
      tokenizer_ = Tokenizer::create(tokenizer_kind, text, tokenizer_files);
      text_tokens_ = tokenizer_->encode(text);
      n_total_ = static_cast<int64_t>(text_tokens_.size());
    } catch (const std::bad_alloc&) {
      fail("out of memory reading data file '", path, "' (", format_bytes(check_input_file(path, "data file")),
           " of text, held as 32-bit tokens; `loom tokenize` writes a token file that is read memory-mapped)");
    } catch (const Error& e) {
      // The tokenizer's message (invalid UTF-8 at an offset) does not know the file.
      const std::string what = e.what();
      if (what.find(path) != std::string::npos) throw;
      fail("data file '", path, "': ", what);
    }
  }
  n_train_ = static_cast<int64_t>(static_cast<double>(n_total_) * (1.0 - val_fraction));
  for (Split s : {Split::Train, Split::Val})
    check(size(s) > block_size + 1, "data file '", path, "' is too short: its ", s == Split::Train ? "train" : "val",
          " split has ", size(s), " tokens, need more than block_size + 1 = ", block_size + 1);
}

Batch TextDataset::batch(Split split, uint64_t seed, int64_t step, int64_t row_begin, int64_t B,
                         int64_t T) const {
  const int64_t split_size = size(split), split_begin = split == Split::Train ? 0 : n_train_;
  check(T + 1 < split_size, "sequence length ", T, " too long for a split of ", split_size, " tokens");
  Batch batch{Tensor::empty({B, T}, DType::I32, MemoryCategory::Other),
              Tensor::empty({B, T}, DType::I32, MemoryCategory::Other), row_begin};
  const uint64_t windows = static_cast<uint64_t>(split_size - T - 1);
  const uint64_t key = mix(mix(mix(seed) ^ static_cast<uint64_t>(split)) ^ static_cast<uint64_t>(step));
  for (int64_t b = 0; b < B; ++b) {
    const uint64_t row = static_cast<uint64_t>(row_begin + b);
    const auto start = split_begin + static_cast<int64_t>(mix(key ^ row) % windows);
    copy_tokens(start, T, batch.inputs.i32() + b * T);
    copy_tokens(start + 1, T, batch.targets.i32() + b * T);
  }
  return batch;
}

void TextDataset::copy_tokens(int64_t begin, int64_t n, int32_t* out) const {
  if (token_file_) {
    token_file_->copy(begin, n, out, tokenizer_->vocab_size());
    return;
  }
  std::memcpy(out, text_tokens_.data() + begin, static_cast<size_t>(n) * sizeof(int32_t));
}

}  // namespace loom::data
