// Input files are judged by stat before anything opens them: only regular files of a
// bounded size pass; FIFOs (which would block), directories and devices are named.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "loom/data/input_file.hpp"
#include "loom/data/text_dataset.hpp"
#include "test_util.hpp"

namespace {

using loom::data::check_input_file;
using loom::data::file_kind;
using loom::testing::error_of;

TEST(DataInputFile, OnlyRegularFilesOfABoundedSizePass) {
  const std::filesystem::path dir = loom::testing::fresh_temp_dir("loom_input_file");
  const std::string text = (dir / "text.txt").string(), fifo = (dir / "fifo").string(), loop = (dir / "loop").string();
  std::ofstream(text) << "hello";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::filesystem::create_symlink("loop", loop);
  EXPECT_EQ(check_input_file(text, "data file", 5), 5);
  EXPECT_EQ(error_of([&] { check_input_file(text, "data file", 4); }),
            "data file '" + text + "' is 5 B (5 bytes), more than the limit of 4 B");
  EXPECT_EQ(error_of([&] { check_input_file(fifo, "data file"); }),
            "data file '" + fifo + "' is a FIFO (named pipe), not a regular file");
  EXPECT_EQ(error_of([&] { check_input_file(dir.string(), "config file"); }),
            "config file '" + dir.string() + "' is a directory, not a regular file");
  EXPECT_EQ(error_of([] { check_input_file("/dev/null", "data file"); }),
            "data file '/dev/null' is a character device, not a regular file");
  EXPECT_EQ(error_of([&] { check_input_file(loop, "data file"); }),
            "cannot open data file '" + loop + "': Too many levels of symbolic links");
  EXPECT_EQ(file_kind(loop), "a symbolic link loop");
  EXPECT_EQ(file_kind((dir / "absent").string()), "missing");
  EXPECT_EQ(error_of([&] { loom::data::TextDataset(fifo, "char", 4); }),
            "data file '" + fifo + "' is a FIFO (named pipe), not a regular file");
}

}  // namespace
