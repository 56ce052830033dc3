// `loom bench gemm --threads 0` measures with all cores, as `loom train --threads 0` runs, and
// its rows say how many threads that was (they said "0").
#include <gtest/gtest.h>
#include <omp.h>

#include <sstream>

#include "apps/cli_test_util.hpp"

namespace loom::testing {
namespace {

TEST(BenchGemm, ThreadsZeroRowsNameTheCoresUsed) {
  // Only the first row (square 1024) is measured: `head` closes the pipe after it (rows are flushed).
  const CommandResult r = run_command(std::string(LOOM_BINARY) + " bench gemm --threads 0 | head -n 4");
  std::istringstream lines(r.output);
  std::string line, name, size;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(std::getline(lines, line)) << r.output;
  std::istringstream row(line);
  int threads = -1;
  row >> name >> size >> threads;
  EXPECT_EQ(name + " " + size, "square 1024") << r.output;
  EXPECT_EQ(threads, omp_get_num_procs()) << r.output;
}

}  // namespace
}  // namespace loom::testing
