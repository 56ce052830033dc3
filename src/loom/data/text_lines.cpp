#include "loom/data/text_lines.hpp"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "loom/data/input_file.hpp"

namespace loom::data {

TextLines::TextLines(const std::string& path, const std::string& what, int64_t max_bytes) : path_(path) {
  check_input_file(path, what, max_bytes);
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "cannot open ", what, " '", path, "': ", std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  text_ = ss.str();
}

bool TextLines::next(std::vector<std::string_view>& fields) {
  while (pos_ < text_.size()) {
    size_t end = text_.find('\n', pos_);
    if (end == std::string::npos) end = text_.size();
    std::string_view line(text_.data() + pos_, end - pos_);
    pos_ = end + 1;
    ++line_;
    fields.clear();
    size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
      size_t j = i;
      while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
      if (j > i) fields.push_back(line.substr(i, j - i));
      i = j;
    }
    if (!fields.empty() && fields.front().front() != '#') return true;
  }
  return false;
}

int64_t TextLines::to_int(std::string_view field, const char* what) const {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), v);
  if (ec != std::errc() || end != field.data() + field.size()) fail_here(what, " must be an integer, got '", field, "'");
  return v;
}

float TextLines::to_float(std::string_view field, const char* what) const {
  float v = 0.0f;
  const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), v);
  if (ec != std::errc() || end != field.data() + field.size() || !std::isfinite(v))
    fail_here(what, " must be a finite number, got '", field, "'");
  return v;
}

}  // namespace loom::data
