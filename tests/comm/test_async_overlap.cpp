// Asynchronous collectives make progress while the caller computes. On this 2-core machine
// two ranks already use both cores, so the copying part of a shared-memory all-reduce cannot
// run beside compute; what a communication thread can hide is the time spent waiting for a
// peer. Rank 1 plays a peer that is still busy (it joins the all-reduce 150 ms late, as a
// slower worker would); rank 0 starts the all-reduce asynchronously, computes, then waits:
// its wall time must be well below the all-reduce's time plus the compute's.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "comm/mpi_test_env.hpp"

namespace loom::comm {
namespace {

using Clock = std::chrono::steady_clock;
using loom::testing::world;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Arithmetic that stays in registers: a stand-in for a layer's backward.
double compute(int64_t iterations) {
  double x = 1.0;
  for (int64_t i = 0; i < iterations; ++i) x = std::sqrt(x * 1.0000001 + 1e-9);
  return x;
}

TEST(AsyncOverlap, AllReduceProgressesDuringCompute) {
  ProcessGroup& g = world();
  if (g.size() != 2) GTEST_SKIP() << "timed on the 2-rank case, one rank per core";
  std::vector<float> data(static_cast<size_t>(4) << 20, 1.0f);  // 16 MiB
  const auto n = static_cast<int64_t>(data.size());
  const auto peer_delay = std::chrono::milliseconds(150);
  const int64_t iterations = 30'000'000;
  double comm_alone = 1e9, compute_alone = 1e9, together = 1e9;
  for (int round = 0; round < 3; ++round) {  // best of three: the machine is shared
    g.barrier();
    auto t0 = Clock::now();
    if (g.rank() == 1) std::this_thread::sleep_for(peer_delay);
    g.all_reduce(data.data(), n, ReduceOp::Max);
    comm_alone = std::min(comm_alone, seconds_since(t0));

    g.barrier();
    t0 = Clock::now();
    volatile double sink = compute(iterations);
    compute_alone = std::min(compute_alone, seconds_since(t0));

    g.barrier();
    t0 = Clock::now();
    if (g.rank() == 1) {
      std::this_thread::sleep_for(peer_delay);
      g.all_reduce(data.data(), n, ReduceOp::Max);
    } else {
      Work w = g.all_reduce_async(data.data(), n, ReduceOp::Max);
      sink = compute(iterations);
      w.wait();
    }
    together = std::min(together, seconds_since(t0));
    (void)sink;
  }
  EXPECT_EQ(data[12345], 1.0f);
  if (g.rank() != 0) return;
  std::printf("[rank 0] all-reduce with a late peer %.3f s, compute %.3f s, both overlapped %.3f s\n", comm_alone,
              compute_alone, together);
  EXPECT_GT(comm_alone, 0.14);  // it did wait for the peer
  // At least a quarter of the wait hidden behind the compute. A bound on the wait itself, not
  // a fraction of the sum: under ASan the compute takes ~3.2 s instead of ~0.16 s, and a 15%
  // cut of the sum would need more time hidden than the 0.15 s wait there is. Measured quiet:
  // 0.244 s together vs 0.164 + 0.156 s (49% hidden: the reduction's copies share the cores
  // with the compute), under ASan 3.216 s vs 3.203 + 0.167 s. Without overlap the two add up.
  EXPECT_LT(together, compute_alone + 0.75 * comm_alone);
}

TEST(EmulatedLink, AllReduceTakesAtLeastTheModelledTime) {
  ProcessGroup& g = world();
  if (g.size() < 2) GTEST_SKIP() << "no link on one rank";
  std::vector<float> x(static_cast<size_t>(1) << 18, 1.0f);  // 1 MiB
  g.set_emulated_link(1.0, 50.0);  // 1 Gbit/s, 50 us
  Work w = g.all_reduce_async(x.data(), static_cast<int64_t>(x.size()), ReduceOp::Sum, AllReduceAlgorithm::Ring);
  w.wait();
  g.set_emulated_link(0.0, 0.0);
  const double p = g.size();
  const double modelled = 2 * (p - 1) * 50e-6 + 2 * (p - 1) / p * (1 << 20) * 8 / 1e9;
  EXPECT_GE(w.busy_seconds(), modelled);
  EXPECT_EQ(x[7], static_cast<float>(g.size()));
}

}  // namespace
}  // namespace loom::comm
