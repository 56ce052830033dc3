#include "loom/report/file_lines.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "loom/error.hpp"

namespace loom::report {

namespace {

constexpr int64_t kReadBlock = int64_t{1} << 20;

std::ifstream open_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "cannot open '", path, "': ", std::strerror(errno));
  return in;
}

// Bytes [at, at + n) of the file.
std::string read_block(std::ifstream& in, const std::string& path, int64_t at, int64_t n) {
  std::string block(static_cast<size_t>(n), '\0');
  in.seekg(at);
  in.read(block.data(), n);
  check(in.gcount() == n, "'", path, "' ended before byte ", at + n, ": it changed while it was read; read it again");
  return block;
}

}  // namespace

void for_each_line(const std::string& path, int64_t size, const LineVisitor& visit) {
  std::ifstream in = open_file(path);
  std::string window;  // bytes [begin, begin + window.size()), not yet given out
  int64_t begin = 0;
  for (int64_t read = 0; read < size;) {
    const size_t scanned = window.size();  // holds no '\n'
    const int64_t n = std::min(kReadBlock, size - read);
    window += read_block(in, path, read, n);
    read += n;
    size_t start = 0;
    for (size_t nl = window.find('\n', scanned); nl != std::string::npos; nl = window.find('\n', nl + 1)) {
      if (!visit(begin + static_cast<int64_t>(start), std::string_view(window).substr(start, nl - start))) return;
      start = nl + 1;
    }
    window.erase(0, start);
    begin += static_cast<int64_t>(start);
  }
  if (!window.empty()) visit(begin, window);
}

void for_each_line_backward(const std::string& path, int64_t size, const LineVisitor& visit) {
  std::ifstream in = open_file(path);
  std::string window;  // bytes [begin, begin + window.size()): the start of the part still to give out
  int64_t begin = size;
  bool final_piece = true;  // the piece at window's end follows the file's last '\n'
  while (true) {
    size_t end = window.size();  // of the piece at window's end
    for (size_t nl; end > 0 && (nl = window.rfind('\n', end - 1)) != std::string::npos; end = nl) {
      const bool line = !(final_piece && nl + 1 == end);
      if (line && !visit(begin + static_cast<int64_t>(nl + 1), std::string_view(window).substr(nl + 1, end - nl - 1))) return;
      final_piece = false;
    }
    window.resize(end);
    if (begin == 0) break;
    // At least as much as is held: a line longer than a block is read in time linear in it.
    const int64_t n = std::min(std::max(kReadBlock, static_cast<int64_t>(window.size())), begin);
    begin -= n;
    window.insert(0, read_block(in, path, begin, n));
  }
  if (!(final_piece && window.empty())) visit(0, window);
}

}  // namespace loom::report
