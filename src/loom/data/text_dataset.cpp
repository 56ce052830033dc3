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
                         double val_fraction) {
  check(val_fraction > 0.0 && val_fraction < 1.0, "val_fraction must be in (0, 1), got ", val_fraction);
  try {
    const std::string text = read_text_file(path);
    check(!text.empty(), "data file '", path, "' is empty");
    tokenizer_ = Tokenizer::create(tokenizer_kind, text);
    std::vector<int32_t> all = tokenizer_->encode(text);
    const auto n_train = static_cast<int64_t>(static_cast<double>(all.size()) * (1.0 - val_fraction));
    train_.assign(all.begin(), all.begin() + n_train);
    val_.assign(all.begin() + n_train, all.end());
  } catch (const std::bad_alloc&) {
    fail("out of memory reading data file '", path, "' (", format_bytes(check_input_file(path, "data file")),
         " of text, held as 32-bit tokens)");
  } catch (const Error& e) {
    // The tokenizer's message (invalid UTF-8 at an offset) does not know the file.
    const std::string what = e.what();
    if (what.find(path) != std::string::npos) throw;
    fail("data file '", path, "': ", what);
  }
  for (Split s : {Split::Train, Split::Val})
    check(size(s) > block_size + 1, "data file '", path, "' is too short: its ", s == Split::Train ? "train" : "val",
          " split has ", size(s), " tokens, need more than block_size + 1 = ", block_size + 1);
}

Batch TextDataset::batch(Split split, uint64_t seed, int64_t step, int64_t row_begin, int64_t B,
                         int64_t T) const {
  const std::vector<int32_t>& data = tokens(split);
  check(T + 1 < static_cast<int64_t>(data.size()), "sequence length ", T, " too long for a split of ",
        data.size(), " tokens");
  Batch batch{Tensor::empty({B, T}, DType::I32, MemoryCategory::Other),
              Tensor::empty({B, T}, DType::I32, MemoryCategory::Other)};
  const uint64_t windows = data.size() - static_cast<uint64_t>(T) - 1;
  const uint64_t key = mix(mix(mix(seed) ^ static_cast<uint64_t>(split)) ^ static_cast<uint64_t>(step));
  for (int64_t b = 0; b < B; ++b) {
    const uint64_t row = static_cast<uint64_t>(row_begin + b);
    const uint64_t start = mix(key ^ row) % windows;
    std::memcpy(batch.inputs.i32() + b * T, data.data() + start, static_cast<size_t>(T) * sizeof(int32_t));
    std::memcpy(batch.targets.i32() + b * T, data.data() + start + 1, static_cast<size_t>(T) * sizeof(int32_t));
  }
  return batch;
}

}  // namespace loom::data
