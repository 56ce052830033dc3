// The watchdog and the debug mode. A rank that skips a collective must end the job with a
// report naming it (run by the CTest case mpi.watchdog, which sets LOOM_TEST_WATCHDOG=1 and
// matches the report; the job is expected to abort). Ranks calling different collectives in
// debug mode get the same error on every rank, naming each rank's call.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "comm/mpi_test_env.hpp"
#include "loom/error.hpp"

namespace loom::comm {
namespace {

using loom::testing::world;

TEST(Watchdog, ReportsTheRankThatSkippedACollective) {
  if (std::getenv("LOOM_TEST_WATCHDOG") == nullptr) GTEST_SKIP() << "run by the mpi.watchdog CTest case";
  ProcessGroup& g = world();
  ASSERT_GE(g.size(), 2);
  g.set_timeout(2.0);
  g.barrier();
  std::vector<float> x(10, 1.0f);
  if (g.rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(60));  // "hangs" without calling the all-reduce
  } else {
    g.all_reduce(x.data(), 10);  // the watchdog aborts the job here
  }
  FAIL() << "the watchdog did not fire";
}

TEST(Watchdog, DebugModeNamesMismatchedCalls) {
  ProcessGroup& g = world();
  if (g.size() < 2) GTEST_SKIP() << "needs two ranks to disagree";
  g.set_debug_checks(true);
  std::vector<float> x(10, 1.0f);
  try {
    if (g.rank() == 0) g.all_reduce(x.data(), 10);
    else g.broadcast_async(x.data(), 7, 0).wait();
    FAIL() << "expected a mismatch error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("collective mismatch on group 'world' at #"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 0 calls all_reduce[mpi,sum](10 floats)"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 1 calls broadcast(7 floats)"), std::string::npos) << what;
  }
  g.all_reduce(x.data(), 10);  // the group is still usable, and all ranks agree again
  g.set_debug_checks(false);
  EXPECT_EQ(x[0], static_cast<float>(g.size()));
}

}  // namespace
}  // namespace loom::comm
