// A text file read whole and walked line by line, so a reader can name "<file>:<line>" in
// every error, and split a line into whitespace-separated fields without copying.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "loom/error.hpp"

namespace loom::data {

class TextLines {
 public:
  // Checks the file (a regular file of at most max_bytes, what names it in messages) and reads it.
  TextLines(const std::string& path, const std::string& what, int64_t max_bytes);

  // The next line that is not blank and not a '#' comment, with its fields; false at the end.
  bool next(std::vector<std::string_view>& fields);
  int64_t line_number() const { return line_; }
  const std::string& path() const { return path_; }

  // loom::Error "<path>:<line>: <parts>".
  template <class... Parts>
  [[noreturn]] void fail_here(const Parts&... parts) const {
    fail(path_, ":", line_, ": ", parts...);
  }
  int64_t to_int(std::string_view field, const char* what) const;
  float to_float(std::string_view field, const char* what) const;

 private:
  std::string path_, text_;
  size_t pos_ = 0;
  int64_t line_ = 0;
};

}  // namespace loom::data
