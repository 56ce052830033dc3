// Reading a file's lines forwards and backwards in blocks: the same lines and offsets as
// std::getline, whatever falls on a block's edge (1 MiB), for lines longer than a block, a
// missing final '\n', blank lines and CR LF; only the first `size` bytes; a file cut meanwhile
// is an error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "loom/error.hpp"
#include "loom/report/file_lines.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
using Lines = std::vector<std::pair<int64_t, std::string>>;

Lines by_getline(const std::string& content) {
  Lines out;
  std::istringstream in(content);
  int64_t offset = 0;
  for (std::string line; std::getline(in, line);) {
    out.emplace_back(offset, line);
    offset += static_cast<int64_t>(line.size()) + 1;
  }
  return out;
}

Lines read(const std::string& path, int64_t size, bool backward) {
  Lines out;
  auto visit = [&](int64_t offset, std::string_view line) {
    out.emplace_back(offset, std::string(line));
    return true;
  };
  if (backward) loom::report::for_each_line_backward(path, size, visit);
  else loom::report::for_each_line(path, size, visit);
  return out;
}

TEST(ReportFileLines, AsGetlineGivesThemInEitherDirection) {
  const fs::path dir = loom::testing::fresh_temp_dir("loom_file_lines_" + std::to_string(::getpid()));
  const size_t kBlock = size_t{1} << 20;
  std::vector<std::string> contents{"", "\n", "\n\n", "a", "a\n", "a\n\nb", "ab\ncd\n", "x\r\ny\r\n", "\nfirst blank"};
  for (size_t at : {kBlock - 2, kBlock - 1, kBlock, kBlock + 1})  // a '\n' about a block's edge
    contents.push_back(std::string(at, 'a') + "\n" + std::string(100, 'b') + "\nc");
  contents.push_back("short\n" + std::string(3 * kBlock + 5, 'l') + "\nshort\n");  // longer than a block
  contents.push_back(std::string(2 * kBlock + 7, 'n'));  // one line, no '\n'
  for (const std::string& content : contents) {
    const std::string path = (dir / "f").string();
    std::ofstream(path, std::ios::binary) << content;
    const Lines want = by_getline(content);
    const int64_t size = static_cast<int64_t>(content.size());
    EXPECT_EQ(read(path, size, false), want) << content.size() << " bytes";
    Lines backward = read(path, size, true);
    std::reverse(backward.begin(), backward.end());
    EXPECT_EQ(backward, want) << content.size() << " bytes";
  }
  // Only the first `size` bytes (a live run appends meanwhile); a visit returning false stops.
  const std::string path = (dir / "f").string();
  std::ofstream(path, std::ios::binary) << "one\ntwo\nthree\n";
  EXPECT_EQ(read(path, 7, false), (Lines{{0, "one"}, {4, "two"}}));
  EXPECT_EQ(read(path, 7, true), (Lines{{4, "two"}, {0, "one"}}));
  int visits = 0;
  loom::report::for_each_line_backward(path, 14, [&](int64_t, std::string_view) { return ++visits < 2; });
  EXPECT_EQ(visits, 2);
  // Cut below `size` while read: an error, never a line made up.
  try {
    read(path, 100, false);
    ADD_FAILURE() << "no error";
  } catch (const loom::Error& e) {
    EXPECT_NE(std::string(e.what()).find("changed while it was read"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read(path, 100, true), loom::Error);
  fs::remove_all(dir);
}

}  // namespace
