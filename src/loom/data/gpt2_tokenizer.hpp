// GPT-2's byte-level BPE tokenizer, read from the files its public releases ship
// (vocab.json: token -> id; merges.txt: one merge "a b" per line, best first). Encoding:
// the text is pre-split by GPT-2's pattern (contractions, runs of letters, of numbers, of
// other symbols, each with an optional leading space, and white space), each piece's UTF-8
// bytes become printable stand-in characters (the byte-to-unicode table), and adjacent
// symbols merge by rank until no known merge remains. Any byte string round-trips, since
// every byte is a token of its own before merging. "<|endoftext|>" in a text is plain text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "loom/data/tokenizer.hpp"

namespace loom::data {

class Gpt2Tokenizer : public Tokenizer {
 public:
  // vocab: token strings (in the byte-to-unicode alphabet) by id; merges: pairs "a b" by
  // rank. Throws loom::Error, naming `vocab_source` / `merges_source` and the entry, for a
  // token outside that alphabet, a byte with no token, or a merge of or into unknown tokens.
  Gpt2Tokenizer(std::vector<std::string> vocab, std::vector<std::string> merges,
                const std::string& vocab_source = "vocab", const std::string& merges_source = "merges");
  // Reads <dir>/vocab.json and <dir>/merges.txt; errors name the file and line.
  static Gpt2Tokenizer from_files(const std::string& dir);
  // The text after "gpt2:" of spec().
  static Gpt2Tokenizer from_spec_body(std::string_view body);

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(vocab_.size()); }
  // "gpt2:" + {"merges": [...], "vocab": [...]} as JSON: the whole tokenizer, so a checkpoint
  // decodes without the original files.
  std::string spec() const override;

 private:
  void merge_pieces(std::vector<int32_t>& symbols) const;

  std::vector<std::string> vocab_, merges_;
  std::vector<std::string> decoded_;  // id -> its bytes
  int32_t byte_token_[256];           // byte -> id of its single-character token
  struct Merge {
    int32_t rank, merged;
  };
  std::unordered_map<uint64_t, Merge> merge_of_;  // (left id << 32 | right id) -> merge
};

// GPT-2's pre-tokenization: the pieces of text (UTF-8 substrings) its pattern
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ matches,
// in order; concatenated they are the text. A byte that is not valid UTF-8 counts as a symbol
// (neither letter, number nor space), so any bytes split.
std::vector<std::string_view> gpt2_pre_split(std::string_view text);

// The printable character GPT-2 writes for each byte (its bytes_to_unicode table).
char32_t gpt2_byte_to_unicode(uint8_t byte);

}  // namespace loom::data
