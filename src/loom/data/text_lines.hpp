// A text file streamed line by line, so a reader can name "<file>:<line>" in every error, and
// split a line into whitespace-separated fields without copying. It holds one buffer of the
// file (a line longer than the buffer grows it), not the whole file: a graph's edges file may
// be gigabytes.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "loom/error.hpp"

namespace loom::data {

class TextLines {
 public:
  // Checks the file (a regular file of at most max_bytes, what names it in messages) and opens it.
  TextLines(const std::string& path, const std::string& what, int64_t max_bytes);

  // The next line that is not blank and not a '#' comment, with its fields (valid until the
  // next call); false at the end.
  bool next(std::vector<std::string_view>& fields);
  int64_t line_number() const { return line_; }
  // Bytes of the file it holds at once: its buffer, the longest line's size or more.
  int64_t buffer_bytes() const { return static_cast<int64_t>(buf_.size()); }
  const std::string& path() const { return path_; }

  // loom::Error "<path>:<line>: <parts>".
  template <class... Parts>
  [[noreturn]] void fail_here(const Parts&... parts) const {
    fail(path_, ":", line_, ": ", parts...);
  }
  int64_t to_int(std::string_view field, const char* what) const;
  float to_float(std::string_view field, const char* what) const;
  // to_float of each of fields into out.
  void to_floats(const std::vector<std::string_view>& fields, size_t first, size_t count, float* out,
                 const char* what) const;

 private:
  // The next line (without its '\n'), reading more of the file as needed; false at the end.
  bool next_line(std::string_view& line);

  std::string path_, what_;
  std::ifstream in_;
  std::string buf_;  // read from the file; buf_[pos_, end_) not yet walked past
  size_t pos_ = 0, end_ = 0;
  bool eof_ = false;
  int64_t line_ = 0;
};

}  // namespace loom::data
