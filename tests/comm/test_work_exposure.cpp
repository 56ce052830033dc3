// What a wait on a Work counts as exposed communication (comm/work.hpp): the time from the
// wait's start to the operation's end. The woken caller's wait for its next turn on a core
// (another rank computing there) is not communication; here a thread that holds the
// operation's lock after finishing it stands in for that turn.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>

#include "loom/comm/work.hpp"

namespace loom::comm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

TEST(WorkExposure, AWaitCountsUntilTheOperationEndsNotUntilTheCallerRunsAgain) {
  auto state = std::make_shared<Work::State>();
  auto counter = std::make_shared<std::atomic<int64_t>>(0);
  Work work(state);
  work.count_waits_into(counter);
  std::thread communication([state] {
    std::this_thread::sleep_for(milliseconds(40));
    std::lock_guard<std::mutex> lock(state->mutex);  // ends the operation, then keeps the waiter out
    state->done = true;
    state->finished_at = Clock::now();
    state->done_cv.notify_all();
    std::this_thread::sleep_for(milliseconds(150));
  });
  const auto t0 = Clock::now();
  work.wait();
  const double waited = seconds(Clock::now() - t0);
  communication.join();
  const double exposed = 1e-9 * static_cast<double>(counter->load());
  ASSERT_GE(waited, 0.17) << "the waiter returned before the lock was free";
  EXPECT_GE(exposed, 0.035);
  EXPECT_LT(exposed, 0.12) << "the turn after the operation's end was counted as communication";
  EXPECT_NEAR(work.seconds_exposed_after(t0), exposed, 0.005);
}

TEST(WorkExposure, AnOperationDoneBeforeTheWaitExposesNothing) {
  auto state = std::make_shared<Work::State>();
  auto counter = std::make_shared<std::atomic<int64_t>>(0);
  Work work(state);
  work.count_waits_into(counter);
  state->finish(nullptr);
  std::this_thread::sleep_for(milliseconds(5));
  const auto t0 = Clock::now();
  work.wait();
  EXPECT_EQ(counter->load(), 0);
  EXPECT_EQ(work.seconds_exposed_after(t0), 0.0);
  EXPECT_EQ(Work::completed().seconds_exposed_after(t0), 0.0);
}

}  // namespace
}  // namespace loom::comm
