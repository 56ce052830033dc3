#include "loom/data/tokenizer.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

#include "loom/data/gpt2_tokenizer.hpp"
#include "loom/error.hpp"

namespace loom::data {

Utf8Step utf8_step(std::string_view text, size_t i) {
  const auto b0 = static_cast<unsigned char>(text[i]);
  const int extra = b0 < 0x80 ? 0 : (b0 >> 5) == 0x6 ? 1 : (b0 >> 4) == 0xE ? 2 : (b0 >> 3) == 0x1E ? 3 : -1;
  if (extra < 0) return {0, 0, Utf8Step::Invalid, i};
  char32_t cp = extra == 0 ? b0 : extra == 1 ? (b0 & 0x1F) : extra == 2 ? (b0 & 0x0F) : (b0 & 0x07);
  for (int k = 1; k <= extra; ++k) {
    if (i + k >= text.size()) return {0, 0, Utf8Step::Truncated, i};
    const auto b = static_cast<unsigned char>(text[i + k]);
    if ((b >> 6) != 0x2) return {0, 0, Utf8Step::Invalid, i + k};
    cp = (cp << 6) | (b & 0x3F);
  }
  // The shortest form only (an overlong one would decode two byte strings to one code
  // point), and no UTF-16 surrogates or values past U+10FFFF, which have no encoding.
  static constexpr char32_t kSmallest[] = {0, 0x80, 0x800, 0x10000};
  if (cp < kSmallest[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {0, 0, Utf8Step::NotShortest, i};
  return {cp, static_cast<size_t>(extra) + 1, Utf8Step::None, 0};
}

std::vector<char32_t> utf8_decode(std::string_view text) {
  std::vector<char32_t> out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const Utf8Step s = utf8_step(text, i);
    check(s.problem != Utf8Step::Invalid, "invalid UTF-8 at byte offset ", s.problem_at);
    check(s.problem != Utf8Step::Truncated, "truncated UTF-8 sequence at byte offset ", s.problem_at);
    check(s.problem != Utf8Step::NotShortest, "invalid UTF-8 at byte offset ", s.problem_at,
          " (an overlong form, a surrogate or a value past U+10FFFF)");
    out.push_back(s.code_point);
    i += s.length;
  }
  return out;
}

std::string utf8_encode(const std::vector<char32_t>& code_points) {
  std::string out;
  for (char32_t cp : code_points) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

std::string code_point_name(char32_t code_point) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(code_point));
  return buf;
}

CharTokenizer::CharTokenizer(std::vector<char32_t> vocabulary) : vocab_(std::move(vocabulary)) {
  check(!vocab_.empty(), "character vocabulary is empty");
  check(std::is_sorted(vocab_.begin(), vocab_.end()) &&
            std::adjacent_find(vocab_.begin(), vocab_.end()) == vocab_.end(),
        "character vocabulary must be sorted and without repeats");
}

CharTokenizer CharTokenizer::from_text(std::string_view text) {
  const std::vector<char32_t> cps = utf8_decode(text);
  std::set<char32_t> distinct(cps.begin(), cps.end());
  check(!distinct.empty(), "cannot build a character vocabulary from empty text");
  return CharTokenizer(std::vector<char32_t>(distinct.begin(), distinct.end()));
}

std::vector<int32_t> CharTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  size_t at = 0;  // the byte offset of cp, for the message
  for (char32_t cp : utf8_decode(text)) {
    auto it = std::lower_bound(vocab_.begin(), vocab_.end(), cp);
    if (it == vocab_.end() || *it != cp)
      fail("character ", code_point_name(cp), " at byte offset ", at, " is not in the tokenizer's vocabulary");
    ids.push_back(static_cast<int32_t>(it - vocab_.begin()));
    at += cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
  }
  return ids;
}

std::string CharTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::vector<char32_t> cps;
  for (int32_t id : ids) {
    check(id >= 0 && id < vocab_size(), "token id ", id, " out of range [0, ", vocab_size(), ")");
    cps.push_back(vocab_[static_cast<size_t>(id)]);
  }
  return utf8_encode(cps);
}

std::string CharTokenizer::spec() const { return "char:" + utf8_encode(vocab_); }

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    check(id >= 0 && id < 256, "byte token id ", id, " out of range [0, 256)");
    out += static_cast<char>(id);
  }
  return out;
}

std::unique_ptr<Tokenizer> Tokenizer::create(const std::string& kind, std::string_view text, const std::string& files) {
  if (kind == "char") return std::make_unique<CharTokenizer>(CharTokenizer::from_text(text));
  if (kind == "byte") return std::make_unique<ByteTokenizer>();
  if (kind == "gpt2") {
    check(!files.empty(), "the gpt2 tokenizer reads vocab.json and merges.txt: name their directory (tokenizer_dir)");
    return std::make_unique<Gpt2Tokenizer>(Gpt2Tokenizer::from_files(files));
  }
  fail("unknown tokenizer '", kind, "' (expected 'char', 'byte' or 'gpt2')");
}

std::unique_ptr<Tokenizer> Tokenizer::from_spec(const std::string& spec) {
  if (spec == "byte") return std::make_unique<ByteTokenizer>();
  if (spec.rfind("char:", 0) == 0) return std::make_unique<CharTokenizer>(utf8_decode(spec.substr(5)));
  if (spec.rfind("gpt2:", 0) == 0)
    return std::make_unique<Gpt2Tokenizer>(Gpt2Tokenizer::from_spec_body(std::string_view(spec).substr(5)));
  fail("unknown tokenizer spec '", spec.substr(0, 16), "'");
}

}  // namespace loom::data
