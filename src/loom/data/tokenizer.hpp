// Tokenizers for text files: character-level (the distinct Unicode code points of the
// corpus, sorted), byte-level (256 ids, any file) and GPT-2's byte-level BPE (gpt2_tokenizer.hpp). A tokenizer is fully described by
// its spec string, which checkpoints keep so `loom sample` decodes exactly as training did.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace loom::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  // "char:<vocabulary as UTF-8>", "byte" or "gpt2:<vocabulary and merges>" (gpt2_tokenizer.hpp).
  virtual std::string spec() const = 0;

  // Builds the tokenizer named by kind ("char" learns its vocabulary from text, "byte",
  // "gpt2" reads vocab.json and merges.txt from the directory `files`).
  static std::unique_ptr<Tokenizer> create(const std::string& kind, std::string_view text,
                                           const std::string& files = "");
  static std::unique_ptr<Tokenizer> from_spec(const std::string& spec);
};

class CharTokenizer : public Tokenizer {
 public:
  explicit CharTokenizer(std::vector<char32_t> vocabulary);
  static CharTokenizer from_text(std::string_view text);
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(vocab_.size()); }
  std::string spec() const override;

 private:
  std::vector<char32_t> vocab_;  // sorted code points; id = index
};

class ByteTokenizer : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return 256; }
  std::string spec() const override { return "byte"; }
};

// The code point whose UTF-8 encoding starts at text[at], or why the bytes there are not
// one: a byte that starts no sequence or is no continuation (Invalid, at that byte), a
// sequence cut off by the end (Truncated), or not the shortest form of a scalar value
// (NotShortest: an overlong form, a surrogate or a value past U+10FFFF).
struct Utf8Step {
  enum Problem { None, Invalid, Truncated, NotShortest };
  char32_t code_point = 0;
  size_t length = 0;  // bytes; 0 unless problem == None
  Problem problem = None;
  size_t problem_at = 0;  // byte offset
};
Utf8Step utf8_step(std::string_view text, size_t at);

// UTF-8 <-> code points; throws loom::Error naming the byte offset of invalid input.
std::vector<char32_t> utf8_decode(std::string_view text);
std::string utf8_encode(const std::vector<char32_t>& code_points);
// "U+005A": a code point as Unicode writes it, in messages.
std::string code_point_name(char32_t code_point);

}  // namespace loom::data
