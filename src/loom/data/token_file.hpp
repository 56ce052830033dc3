// Token files: a corpus tokenized once (`loom tokenize`) and read memory-mapped, so training
// data may be larger than memory and every rank maps the same pages. Layout, little-endian:
//   bytes 0-7   magic "LOOMTOKS"
//   bytes 8-11  format version (1)
//   bytes 12-15 bytes per token id: 2 (uint16, vocabularies up to 65536) or 4 (uint32)
//   bytes 16-23 token count N
//   bytes 24-31 length S of the tokenizer spec
//   then the spec (S bytes, the tokenizer as checkpoints record it), zero padding to a
//   multiple of 8, then N ids: the ids nanoGPT's train.bin holds, after a header.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "loom/data/tokenizer.hpp"

namespace loom::data {

constexpr int64_t kTokenFileHeaderBytes = 32;

// Whether path is a regular file starting with the token file magic ("LOOMTOK" suffices, so
// that a damaged last byte of it is reported by TokenFile rather than read as text).
bool is_token_file(const std::string& path);

// Writes a token file: ids appended in pieces, the count filled in by finish(), which
// publishes the file atomically (a temp file renamed), so a reader never sees half of one.
class TokenFileWriter {
 public:
  TokenFileWriter(const std::string& path, const Tokenizer& tokenizer);
  ~TokenFileWriter();
  void append(const std::vector<int32_t>& ids);
  int64_t count() const { return count_; }
  void finish();

 private:
  std::string path_, tmp_;
  FILE* out_ = nullptr;
  int id_bytes_;
  int64_t count_ = 0, vocab_size_;
};

// Tokenizes the text file text_path into the token file token_path with the tokenizer named
// by kind ("char", "byte", "gpt2" with its files' directory), reading the text in pieces so
// the text need not fit in memory: each piece ends before a newline that follows a printable
// ASCII character, where no tokenizer's split can cross, so the ids equal those of the
// whole text encoded at once. Returns the number of tokens written.
// piece_bytes: how much text is read at a time (tests make it small).
int64_t tokenize_text_file(const std::string& text_path, const std::string& token_path, const std::string& kind,
                           const std::string& tokenizer_files = "", int64_t piece_bytes = int64_t{16} << 20);

// A token file mapped read-only. Throws loom::Error naming the path for a file that is not
// one, of another version, truncated or longer than its header says, or whose tokenizer
// spec is malformed, or holding an id outside its tokenizer's vocabulary (every id is
// checked on opening, one pass over the file).
class TokenFile {
 public:
  explicit TokenFile(const std::string& path);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return count_; }
  int id_bytes() const { return id_bytes_; }
  const std::string& tokenizer_spec() const { return spec_; }
  // out[0, n) = ids [begin, begin + n); loom::Error for an id outside [0, vocab_size).
  void copy(int64_t begin, int64_t n, int32_t* out, int64_t vocab_size) const;

 private:
  std::string path_, spec_;
  int id_bytes_ = 4;
  int64_t count_ = 0;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const unsigned char* ids_ = nullptr;
};

}  // namespace loom::data
