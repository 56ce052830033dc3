// The matmul peak that MFU divides by is the peak of the cores, not of the share of a core
// the probe happened to get: a probe sharing its core with a busy thread (another rank
// waiting for it, another job) measures about what it measures alone. Timed by wall clock it
// measured half, and MFU on an oversubscribed run read twice too high (past 100%).
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <thread>

#include "loom/kernels/peak_flops.hpp"
#include "loom/kernels/threads.hpp"

namespace loom::kernels {
namespace {

// This thread and `spinner` pinned to one CPU for the scope; the caller's affinity and
// thread count are restored after.
class OneCpu {
 public:
  OneCpu() : threads_(num_threads()) {
    pthread_getaffinity_np(pthread_self(), sizeof saved_, &saved_);
    for (cpu_ = 0; cpu_ < CPU_SETSIZE && !CPU_ISSET(cpu_, &saved_); ++cpu_) {
    }
    CPU_ZERO(&one_);
    CPU_SET(cpu_, &one_);
    pinned_ = pthread_setaffinity_np(pthread_self(), sizeof one_, &one_) == 0;
    set_num_threads(1);
  }
  ~OneCpu() {
    pthread_setaffinity_np(pthread_self(), sizeof saved_, &saved_);
    set_num_threads(threads_);
  }
  bool pinned() const { return pinned_; }
  void pin(std::thread& t) const { pthread_setaffinity_np(t.native_handle(), sizeof one_, &one_); }

 private:
  int threads_;
  int cpu_ = 0;
  bool pinned_ = false;
  cpu_set_t saved_{}, one_{};
};

TEST(PeakFlops, ASharedCoreMeasuresTheCoresPeak) {
  OneCpu cpu;
  if (!cpu.pinned()) GTEST_SKIP() << "cannot pin this thread to one CPU";
  const double alone = measure_matmul_gflops(0.3, 512);
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    volatile unsigned long spin = 0;
    while (!stop.load(std::memory_order_relaxed)) ++spin;
  });
  cpu.pin(busy);
  const double shared = measure_matmul_gflops(0.6, 512);
  stop = true;
  busy.join();
  RecordProperty("alone_gflops", std::to_string(alone));
  RecordProperty("shared_gflops", std::to_string(shared));
  // Sharing a core halves the wall-clock rate; the cores' peak stays (the margin is for
  // noise between the two probes, far from the half a wall clock measures).
  EXPECT_GT(shared, 0.75 * alone) << "alone " << alone << " GFLOP/s, sharing its core " << shared;
  EXPECT_LT(shared, 1.5 * alone) << "alone " << alone << " GFLOP/s, sharing its core " << shared;
}

}  // namespace
}  // namespace loom::kernels
