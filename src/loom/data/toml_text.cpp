#include "loom/data/toml_text.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "loom/error.hpp"

namespace loom::data {

namespace {

constexpr char kPlaceholder = '!';  // legal in TOML strings and comments, nowhere else

// Where each non-ASCII character of the text stands, as toml++ counts: line and column from
// 1, a column per code point.
struct Position {
  int64_t line, column;
};

// The length of the UTF-8 sequence at text[i] (2-4), or 0 when it is not one: a stray
// continuation byte, a truncated sequence, an overlong form, a surrogate or a code point
// above U+10FFFF.
size_t utf8_length(const std::string& text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b = byte(i);
  size_t n = 0;
  uint32_t cp = 0;
  if (b >= 0xC2 && b <= 0xDF) n = 2, cp = b & 0x1Fu;
  else if (b >= 0xE0 && b <= 0xEF) n = 3, cp = b & 0x0Fu;
  else if (b >= 0xF0 && b <= 0xF4) n = 4, cp = b & 0x07u;
  else return 0;
  if (i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0u) != 0x80u) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3Fu);
  }
  const bool overlong = (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000);
  if (overlong || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
  return n;
}

[[noreturn]] void fail_at(const std::string& origin, int64_t line, int64_t column, const std::string& what) {
  fail(origin, ":", line, ":", column, ": invalid TOML: ", what);
}

}  // namespace

toml::table parse_toml(const std::string& text, const std::string& origin) {
  std::string ascii;  // the text with every non-ASCII character one placeholder
  ascii.reserve(text.size());
  std::vector<Position> non_ascii;
  int64_t line = 1, column = 0;
  size_t i = 0;
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) ascii.append(text, 0, 3), i = 3;  // a byte-order mark: toml++ skips it
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    ++column;
    if (c < 0x80) {
      ascii += static_cast<char>(c);
      if (c == '\n') ++line, column = 0;
      ++i;
      continue;
    }
    const size_t n = utf8_length(text, i);
    if (n == 0) fail_at(origin, line, column, "not UTF-8 (a TOML file is UTF-8 text)");
    ascii += kPlaceholder;
    non_ascii.push_back({line, column});
    i += n;
  }

  try {
    toml::table table = toml::parse(ascii, origin);
    if (non_ascii.empty()) return table;
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    const auto at = [&](const Position& p) {
      return p.line == static_cast<int64_t>(where.line) && p.column == static_cast<int64_t>(where.column);
    };
    const auto on_line = [&](const Position& p) { return p.line == static_cast<int64_t>(where.line); };
    std::string what(e.description());
    if (std::find_if(non_ascii.begin(), non_ascii.end(), at) != non_ascii.end())
      what = "a non-ASCII character outside a quoted string or comment (keys and values other than strings are ASCII)";
    else if (what.find(kPlaceholder) != std::string::npos &&
             std::find_if(non_ascii.begin(), non_ascii.end(), on_line) != non_ascii.end())
      what += " (in this line's text, each non-ASCII character reads as '!': they belong only in strings and comments)";
    fail_at(origin, static_cast<int64_t>(where.line), static_cast<int64_t>(where.column), what);
  }
  // Every non-ASCII character is string or comment content: the parser takes it as it is.
  try {
    return toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    fail_at(origin, static_cast<int64_t>(where.line), static_cast<int64_t>(where.column), std::string(e.description()));
  }
}

}  // namespace loom::data
