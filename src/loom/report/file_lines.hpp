// The lines of a file's first `size` bytes, read in blocks, first to last or last to first,
// each with the offset where it begins. A line is what std::getline gives: the bytes up to a
// '\n' (not included); after the last '\n', only a non-empty rest is a line. Memory: a block
// and the longest line. A file that ends before `size` (cut meanwhile) is a loom::Error.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace loom::report {

// visit(offset, line) returns false to stop.
using LineVisitor = std::function<bool(int64_t offset, std::string_view line)>;

void for_each_line(const std::string& path, int64_t size, const LineVisitor& visit);
void for_each_line_backward(const std::string& path, int64_t size, const LineVisitor& visit);

}  // namespace loom::report
