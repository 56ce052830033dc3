// The watchdog and the call check. A rank that skips a collective or a transfer, or stops
// (SIGSTOP) while others wait on it directly or through a bystander, must end the job with a
// report naming it (run by the CTest cases mpi.watchdog*, which set LOOM_TEST_WATCHDOG and
// match the report; the job is expected to abort). Ranks calling different collectives get
// the same error on every rank, naming each rank's call: in debug mode on every call, else
// on a group's first calls and every few after.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "comm/mpi_test_env.hpp"
#include "loom/error.hpp"

namespace loom::comm {
namespace {

using loom::testing::world;

// The abort case LOOM_TEST_WATCHDOG names, if any.
bool watchdog_case(const char* name) {
  const char* c = std::getenv("LOOM_TEST_WATCHDOG");
  return c != nullptr && std::string(c) == name;
}

// Rank 1 "hangs" without taking part; the others wait on it (wait) until the watchdog
// aborts the job.
void rank_1_skips(const std::function<void(ProcessGroup&, std::vector<float>&)>& wait) {
  ProcessGroup& g = world();
  ASSERT_GE(g.size(), 2);
  g.set_timeout(2.0);
  g.barrier();
  std::vector<float> x(10, 1.0f);
  if (g.rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(60));
  else wait(g, x);
  FAIL() << "the watchdog did not fire";
}

TEST(Watchdog, ReportsTheRankThatSkippedACollective) {
  if (!watchdog_case("1")) GTEST_SKIP() << "run by the mpi.watchdog CTest case";
  rank_1_skips([](ProcessGroup& g, std::vector<float>& x) { g.all_reduce(x.data(), 10); });
}

TEST(Watchdog, ReportsThePeerThatSkippedATransfer) {
  if (!watchdog_case("transfer")) GTEST_SKIP() << "run by the mpi.watchdog_transfer CTest case";
  rank_1_skips([](ProcessGroup& g, std::vector<float>& x) { g.recv_async(x.data(), 10, 1).wait(); });
}

// dp 2 x pp 2 as the trainer lays it out: pp groups {0 1} {2 3}, dp groups {0 2} {1 3}.
// Rank 3 stops; rank 2 waits for its activation, rank 1 in a dp all-reduce with it, and rank
// 0 in a dp all-reduce with rank 2, which never comes: rank 0's report (its timeout is the
// shortest) must name rank 3, not the bystander rank 2.
TEST(Watchdog, NamesTheStoppedRankNotABystander) {
  if (!watchdog_case("stop")) GTEST_SKIP() << "run by the mpi.watchdog_stopped_rank CTest case";
  ProcessGroup& g = world();
  ASSERT_EQ(g.size(), 4);
  std::unique_ptr<ProcessGroup> pp = g.split(g.rank() / 2, g.rank(), "pp");
  std::unique_ptr<ProcessGroup> dp = g.split(g.rank() % 2, g.rank(), "dp");
  for (ProcessGroup* group : {&g, pp.get(), dp.get()}) group->set_timeout(g.rank() == 0 ? 2.0 : 30.0);
  g.barrier();
  std::vector<float> x(10, 1.0f);
  switch (g.rank()) {
    case 3:
      std::raise(SIGSTOP);
      std::this_thread::sleep_for(std::chrono::seconds(60));  // continued only as the job ends
      return;
    case 2: pp->recv_async(x.data(), 10, 1).wait(); break;
    default: dp->all_reduce(x.data(), 10); break;
  }
  FAIL() << "the watchdog did not fire";
}

// Rank 1 starts an all-reduce too large for MPI's eager path and stops inside it; rank 0 then
// starts it as well and waits. Every member has started the collective, so no rank is late:
// the report must still name rank 1, whose heartbeat stopped, not say that no rank holds it up.
TEST(Watchdog, NamesARankThatStoppedInsideACollective) {
  if (!watchdog_case("stop-inside")) GTEST_SKIP() << "run by the mpi.watchdog_stopped_inside CTest case";
  ProcessGroup& g = world();
  ASSERT_EQ(g.size(), 2);
  g.set_timeout(2.0);
  g.barrier();
  std::vector<float> x(1 << 16, 1.0f);  // 256 KiB: the transport waits for the peer to take it
  if (g.rank() == 1) {
    Work started = g.all_reduce_async(x.data(), static_cast<int64_t>(x.size()));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    std::raise(SIGSTOP);
    std::this_thread::sleep_for(std::chrono::seconds(60));  // continued only as the job ends
    return;
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  g.all_reduce(x.data(), static_cast<int64_t>(x.size()));
  g.all_reduce(x.data(), static_cast<int64_t>(x.size()));  // if the first got through, this one cannot
  FAIL() << "the watchdog did not fire";
}

TEST(Watchdog, SplitGroupsInheritTheTimeout) {
  ProcessGroup& g = world();
  const double before = g.timeout();
  g.set_timeout(42.0);
  std::unique_ptr<ProcessGroup> half = g.split(g.rank() % 2, g.rank(), "half");
  std::unique_ptr<ProcessGroup> quarter = half->split(half->rank() % 2, half->rank(), "quarter");
  g.set_timeout(before);
  EXPECT_EQ(half->timeout(), 42.0);
  EXPECT_EQ(quarter->timeout(), 42.0);
}

// Without debug mode the call check still runs on a group's first collectives.
TEST(Watchdog, FirstCallsAreCheckedWithoutDebugMode) {
  ProcessGroup& g = world();
  if (g.size() < 2) GTEST_SKIP() << "needs two ranks to disagree";
  std::unique_ptr<ProcessGroup> fresh = g.split(0, g.rank(), "fresh");
  fresh->set_debug_checks(false);
  std::vector<float> x(10, 1.0f);
  try {
    if (fresh->rank() == 0) fresh->all_reduce(x.data(), 10);
    else fresh->all_reduce(x.data(), 7);
    FAIL() << "expected a mismatch error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("collective mismatch on group 'fresh' at #1:"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 0 calls all_reduce[mpi,sum](10 floats)"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 1 calls all_reduce[mpi,sum](7 floats)"), std::string::npos) << what;
  }
  EXPECT_TRUE(Watchdog::checked(Watchdog::kCheckFirst, false));
  EXPECT_FALSE(Watchdog::checked(Watchdog::kCheckFirst + 1, false));
  EXPECT_TRUE(Watchdog::checked(Watchdog::kCheckEvery * 100, false));
  EXPECT_TRUE(Watchdog::checked(Watchdog::kCheckFirst + 1, true));
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
