#include "loom/data/text_lines.hpp"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>

#include "loom/data/input_file.hpp"

namespace loom::data {

namespace {
constexpr size_t kBufferBytes = size_t{1} << 20;
}  // namespace

TextLines::TextLines(const std::string& path, const std::string& what, int64_t max_bytes)
    : path_(path), what_(what) {
  check_input_file(path, what, max_bytes);  // before opening: a FIFO would block the open
  in_.open(path, std::ios::binary);
  check(in_.good(), "cannot open ", what, " '", path, "': ", std::strerror(errno));
  buf_.resize(kBufferBytes);
}

bool TextLines::next_line(std::string_view& line) {
  for (size_t searched = pos_;;) {
    const void* nl = std::memchr(buf_.data() + searched, '\n', end_ - searched);
    if (nl != nullptr || eof_) {
      const size_t end = nl != nullptr ? static_cast<size_t>(static_cast<const char*>(nl) - buf_.data()) : end_;
      if (nl == nullptr && end == pos_) return false;  // nothing after the last '\n'
      line = std::string_view(buf_.data() + pos_, end - pos_);
      pos_ = nl != nullptr ? end + 1 : end;
      return true;
    }
    // No whole line left: keep the part line at the front, grow if it fills the buffer, read on.
    std::memmove(buf_.data(), buf_.data() + pos_, end_ - pos_);
    end_ -= pos_, searched = end_, pos_ = 0;
    if (end_ == buf_.size()) buf_.resize(2 * buf_.size());
    in_.read(buf_.data() + end_, static_cast<std::streamsize>(buf_.size() - end_));
    end_ += static_cast<size_t>(in_.gcount());
    if (!in_) {
      check(in_.eof(), "cannot read ", what_, " '", path_, "': ", std::strerror(errno));
      eof_ = true;
    }
  }
}

bool TextLines::next(std::vector<std::string_view>& fields) {
  std::string_view line;
  while (next_line(line)) {
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

void TextLines::to_floats(const std::vector<std::string_view>& fields, size_t first, size_t count, float* out,
                          const char* what) const {
  for (size_t k = 0; k < count; ++k) out[k] = to_float(fields[first + k], what);
}

}  // namespace loom::data
