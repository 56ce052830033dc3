#include "loom/data/gpt2_tokenizer.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>

#include "loom/data/text_dataset.hpp"
#include "loom/data/unicode_classes.hpp"
#include "loom/error.hpp"

namespace loom::data {

namespace {

// A code point of the text with where its bytes are; kInvalid for a byte that starts no
// valid UTF-8 sequence.
constexpr char32_t kInvalid = 0xFFFFFFFF;
struct CodePoint {
  char32_t cp;
  size_t begin, end;
};

std::vector<CodePoint> lenient_code_points(std::string_view text) {
  std::vector<CodePoint> out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const Utf8Step s = utf8_step(text, i);
    const size_t n = s.problem == Utf8Step::None ? s.length : 1;
    out.push_back({s.problem == Utf8Step::None ? s.code_point : kInvalid, i, i + n});
    i += n;
  }
  return out;
}

bool is_space(char32_t c) { return c != kInvalid && is_unicode_space(c); }
bool is_letter(char32_t c) { return c != kInvalid && is_unicode_letter(c); }
bool is_number(char32_t c) { return c != kInvalid && is_unicode_number(c); }
bool is_other(char32_t c) { return !is_space(c) && !is_letter(c) && !is_number(c); }

// The length in code points of the match of GPT-2's pattern at cps[i] (always >= 1).
size_t piece_length(const std::vector<CodePoint>& cps, size_t i) {
  const size_t n = cps.size();
  auto at = [&](size_t k) { return k < n ? cps[k].cp : kInvalid; };
  // 's|'t|'re|'ve|'m|'ll|'d
  if (at(i) == U'\'' && i + 1 < n) {
    const char32_t a = at(i + 1), b = i + 2 < n ? at(i + 2) : 0;
    if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
    if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
  }
  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': one optional space, then a run of one class.
  const size_t start = at(i) == U' ' && i + 1 < n ? i + 1 : i;
  for (bool (*in_class)(char32_t) : {is_letter, is_number, is_other}) {
    if (start < n && in_class(at(start))) {
      size_t k = start;
      while (k < n && in_class(at(k))) ++k;
      return k - i;
    }
  }
  // '\s+(?!\S)' leaves the last space of a run before a non-space to the next piece; '\s+'.
  size_t k = i;
  while (k < n && is_space(at(k))) ++k;
  if (k < n && k - i >= 2) return k - 1 - i;
  return k - i;
}

std::string read_file_or_fail(const std::string& path, const std::string& what) {
  try {
    return read_text_file(path);
  } catch (const Error& e) {
    fail("GPT-2 tokenizer ", what, ": ", e.what());
  }
}

// The 1-based line of byte offset `at` in text.
size_t line_of(const std::string& text, size_t at) {
  return static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(std::min(at, text.size())), '\n')) + 1;
}

}  // namespace

char32_t gpt2_byte_to_unicode(uint8_t byte) {
  // Printable Latin-1 stands for itself; the other 68 bytes take 256, 257, ... in byte order.
  auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
  if (printable(byte)) return byte;
  char32_t next = 256;
  for (int b = 0; b < byte; ++b)
    if (!printable(b)) ++next;
  return next;
}

std::vector<std::string_view> gpt2_pre_split(std::string_view text) {
  const std::vector<CodePoint> cps = lenient_code_points(text);
  std::vector<std::string_view> pieces;
  for (size_t i = 0; i < cps.size();) {
    const size_t len = piece_length(cps, i);
    pieces.push_back(text.substr(cps[i].begin, cps[i + len - 1].end - cps[i].begin));
    i += len;
  }
  return pieces;
}

Gpt2Tokenizer::Gpt2Tokenizer(std::vector<std::string> vocab, std::vector<std::string> merges,
                             const std::string& vocab_source, const std::string& merges_source)
    : vocab_(std::move(vocab)), merges_(std::move(merges)) {
  check(!vocab_.empty(), vocab_source, ": the vocabulary is empty");
  check(vocab_.size() < static_cast<size_t>(std::numeric_limits<int32_t>::max()), vocab_source, ": too many tokens");
  std::unordered_map<char32_t, uint8_t> byte_of;
  for (int b = 0; b < 256; ++b) byte_of[gpt2_byte_to_unicode(static_cast<uint8_t>(b))] = static_cast<uint8_t>(b);
  std::unordered_map<std::string, int32_t> id_of;
  std::fill(std::begin(byte_token_), std::end(byte_token_), -1);
  decoded_.reserve(vocab_.size());
  for (size_t id = 0; id < vocab_.size(); ++id) {
    const std::string& token = vocab_[id];
    check(!token.empty(), vocab_source, ": token ", id, " is empty");
    check(id_of.emplace(token, static_cast<int32_t>(id)).second, vocab_source, ": token '", token, "' appears twice");
    std::vector<char32_t> cps;
    try {
      cps = utf8_decode(token);
    } catch (const Error& e) {
      fail(vocab_source, ": token ", id, ": ", e.what());
    }
    std::string bytes;
    for (char32_t c : cps) {
      auto it = byte_of.find(c);
      if (it == byte_of.end())
        fail(vocab_source, ": token ", id, " '", token, "' has ", code_point_name(c),
             ", a character outside GPT-2's byte alphabet");
      bytes += static_cast<char>(it->second);
    }
    if (bytes.size() == 1) byte_token_[static_cast<uint8_t>(bytes[0])] = static_cast<int32_t>(id);
    decoded_.push_back(std::move(bytes));
  }
  for (int b = 0; b < 256; ++b)
    check(byte_token_[b] >= 0, vocab_source, ": no token for byte ", b, " ('",
          utf8_encode({gpt2_byte_to_unicode(static_cast<uint8_t>(b))}), "'): every byte needs one");
  merge_of_.reserve(merges_.size());
  for (size_t rank = 0; rank < merges_.size(); ++rank) {
    const std::string& m = merges_[rank];
    const size_t space = m.find(' ');
    check(space != std::string::npos && space > 0 && space + 1 < m.size() && m.find(' ', space + 1) == std::string::npos,
          merges_source, ": merge ", rank + 1, " '", m, "' is not two tokens separated by one space");
    const std::string left = m.substr(0, space), right = m.substr(space + 1);
    auto l = id_of.find(left), r = id_of.find(right), joined = id_of.find(left + right);
    check(l != id_of.end() && r != id_of.end(), merges_source, ": merge ", rank + 1, " '", m, "' names a token ('",
          l == id_of.end() ? left : right, "') that ", vocab_source, " does not have");
    check(joined != id_of.end(), merges_source, ": merge ", rank + 1, " '", m, "' makes '", left + right, "', which ",
          vocab_source, " does not have");
    const uint64_t key = (static_cast<uint64_t>(l->second) << 32) | static_cast<uint32_t>(r->second);
    merge_of_.emplace(key, Merge{static_cast<int32_t>(rank), joined->second});  // a repeated pair keeps its best rank
  }
}

Gpt2Tokenizer Gpt2Tokenizer::from_files(const std::string& dir) {
  const std::string vocab_path = dir + "/vocab.json", merges_path = dir + "/merges.txt";
  const std::string vocab_text = read_file_or_fail(vocab_path, "vocabulary");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(vocab_text);
  } catch (const nlohmann::json::parse_error& e) {
    fail("'", vocab_path, "' line ", line_of(vocab_text, e.byte == 0 ? 0 : e.byte - 1), ": not valid JSON (", e.what(), ")");
  }
  check(j.is_object(), "'", vocab_path, "' must be a JSON object of token -> id");
  std::vector<std::string> vocab(j.size());
  std::vector<bool> seen(j.size(), false);
  for (auto it = j.begin(); it != j.end(); ++it) {
    // Only on an error: where the entry is (as written, when its key has no escapes).
    auto where = [&] {
      const size_t at = vocab_text.find(nlohmann::json(it.key()).dump());
      return "'" + vocab_path + "'" + (at == std::string::npos ? "" : " line " + std::to_string(line_of(vocab_text, at))) + ": ";
    };
    check(it->is_number_integer(), where(), "the id of '", it.key(), "' is not an integer");
    const int64_t id = it->get<int64_t>();
    check(id >= 0 && id < static_cast<int64_t>(vocab.size()), where(), "the id ", id, " of '", it.key(),
          "' is outside [0, ", vocab.size(), "): ids must number the tokens 0, 1, 2, ...");
    check(!seen[static_cast<size_t>(id)], where(), "id ", id, " is given to two tokens");
    seen[static_cast<size_t>(id)] = true;
    vocab[static_cast<size_t>(id)] = it.key();
  }
  const std::string merges_text = read_file_or_fail(merges_path, "merges");
  std::vector<std::string> merges;
  size_t line = 0, pos = 0;
  while (pos < merges_text.size()) {
    size_t end = merges_text.find('\n', pos);
    if (end == std::string::npos) end = merges_text.size();
    std::string l = merges_text.substr(pos, end - pos);
    pos = end + 1;
    ++line;
    if (!l.empty() && l.back() == '\r') l.pop_back();
    if (line == 1 && l.rfind("#version", 0) == 0) continue;  // the header GPT-2's files start with
    if (l.empty() && pos >= merges_text.size()) break;      // a final newline
    const size_t space = l.find(' ');
    check(space != std::string::npos && space > 0 && space + 1 < l.size() && l.find(' ', space + 1) == std::string::npos,
          "'", merges_path, "' line ", line, ": expected two tokens separated by one space, got '", l.substr(0, 80), "'");
    merges.push_back(std::move(l));
  }
  return Gpt2Tokenizer(std::move(vocab), std::move(merges), "'" + vocab_path + "'", "'" + merges_path + "'");
}

Gpt2Tokenizer Gpt2Tokenizer::from_spec_body(std::string_view body) {
  try {
    const nlohmann::json j = nlohmann::json::parse(body);
    return Gpt2Tokenizer(j.at("vocab").get<std::vector<std::string>>(), j.at("merges").get<std::vector<std::string>>(),
                         "the stored GPT-2 vocabulary", "the stored GPT-2 merges");
  } catch (const nlohmann::json::exception& e) {
    fail("malformed GPT-2 tokenizer spec: ", e.what());
  }
}

std::string Gpt2Tokenizer::spec() const {
  return "gpt2:" + nlohmann::json{{"merges", merges_}, {"vocab", vocab_}}.dump();
}

void Gpt2Tokenizer::merge_pieces(std::vector<int32_t>& symbols) const {
  // The pair of lowest rank merges everywhere (left to right), until no pair has a merge.
  while (symbols.size() > 1) {
    int32_t best_rank = std::numeric_limits<int32_t>::max();
    uint64_t best_key = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const uint64_t key = (static_cast<uint64_t>(symbols[i]) << 32) | static_cast<uint32_t>(symbols[i + 1]);
      auto it = merge_of_.find(key);
      if (it != merge_of_.end() && it->second.rank < best_rank) {
        best_rank = it->second.rank;
        best_key = key;
      }
    }
    if (best_rank == std::numeric_limits<int32_t>::max()) return;
    const auto left = static_cast<int32_t>(best_key >> 32), right = static_cast<int32_t>(best_key & 0xFFFFFFFF);
    const int32_t merged = merge_of_.at(best_key).merged;
    size_t out = 0;
    for (size_t i = 0; i < symbols.size(); ++i) {
      if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
        symbols[out++] = merged;
        ++i;
      } else {
        symbols[out++] = symbols[i];
      }
    }
    symbols.resize(out);
  }
}

std::vector<int32_t> Gpt2Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  std::vector<int32_t> symbols;
  // Text repeats its words: each distinct piece is merged once per call, then copied.
  std::unordered_map<std::string_view, std::pair<size_t, size_t>> done;  // piece -> its ids' range in `ids`
  for (std::string_view piece : gpt2_pre_split(text)) {
    if (auto it = done.find(piece); it != done.end()) {
      const auto [begin, end] = it->second;
      for (size_t i = begin; i < end; ++i) ids.push_back(ids[i]);
      continue;
    }
    symbols.clear();
    for (char c : piece) symbols.push_back(byte_token_[static_cast<uint8_t>(c)]);
    merge_pieces(symbols);
    done.emplace(piece, std::pair{ids.size(), ids.size() + symbols.size()});
    ids.insert(ids.end(), symbols.begin(), symbols.end());
  }
  return ids;
}

std::string Gpt2Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    check(id >= 0 && id < vocab_size(), "token id ", id, " out of range [0, ", vocab_size(), ")");
    out += decoded_[static_cast<size_t>(id)];
  }
  return out;
}

}  // namespace loom::data
