// `loom bench gemm --threads 0` measures with all cores, as `loom train --threads 0` runs, and
// its rows say how many threads that was (they said "0").
#include <gtest/gtest.h>
#include <omp.h>

#include <sstream>

#include "apps/cli_test_util.hpp"

namespace loom::testing {
namespace {

TEST(BenchGemm, ThreadsZeroRowsNameTheCoresUsed) {
  // Only the first row (square 1024) is measured: `grep -m1` closes the pipe after it (rows
  // are flushed). The header lines before it differ by CPU (a CPU without bf16 instructions
  // gets a note), so the row is found by its name.
  const CommandResult r = run_command(std::string(LOOM_BINARY) + " bench gemm --threads 0 | grep -m1 '^square'");
  const size_t at = r.output.find("square");
  ASSERT_NE(at, std::string::npos) << r.output;
  std::string name, size;
  std::istringstream row(r.output.substr(at));
  int threads = -1;
  row >> name >> size >> threads;
  EXPECT_EQ(name + " " + size, "square 1024") << r.output;
  EXPECT_EQ(threads, omp_get_num_procs()) << r.output;
}

}  // namespace
}  // namespace loom::testing
