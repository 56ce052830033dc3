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

#include <sys/resource.h>

#include "comm/mpi_test_env.hpp"
#include "loom/comm/mpi_collectives.hpp"

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

// bf16 collectives cross the emulated link at 2 bytes an element (each is held to its own
// price: a bf16 run under --net-gbps shows the bytes it saves, and no more).
TEST(EmulatedLink, Bf16CollectivesTakeAtLeastTheirModelledTime) {
  ProcessGroup& g = world();
  if (g.size() < 2) GTEST_SKIP() << "no link on one rank";
  const int p = g.size();
  const int64_t n = int64_t{1} << 16;  // elements per rank
  std::vector<float> x(static_cast<size_t>(n * p), 1.0f), shard(static_cast<size_t>(n));
  std::vector<bfloat16> gathered(static_cast<size_t>(n * p));
  g.set_emulated_link(1.0, 50.0);  // 1 Gbit/s, 50 us
  const EmulatedLink link = emulated_link(1.0, 50.0);
  Work reduce = g.all_reduce_bf16_async(x.data(), n * p, ReduceOp::Sum);
  reduce.wait();
  Work scatter = g.reduce_scatter_bf16_async(x.data(), shard.data(), n, ReduceOp::Sum);
  scatter.wait();
  Work gather = g.all_gather_bf16_async(gathered.data() + g.rank() * n, gathered.data(), n);
  gather.wait();
  g.set_emulated_link(0.0, 0.0);
  const double half = (p - 1) * (50e-6 + static_cast<double>(n) * 2 * 8 / 1e9);  // p - 1 chunks of n bf16
  EXPECT_DOUBLE_EQ(emulated_ring_half_seconds(link, n * p, p, 2), half);
  EXPECT_GE(reduce.busy_seconds(), 2 * half);
  EXPECT_GE(scatter.busy_seconds(), half);
  EXPECT_GE(gather.busy_seconds(), half);
  EXPECT_EQ(x[7], static_cast<float>(p));
}

double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// A communication thread waiting for a late peer leaves the core to compute
// (mpi_collectives.hpp): rank 0's all-reduce waits 300 ms for rank 1 while rank 0 itself
// sleeps, so whatever CPU time rank 0 uses meanwhile is the wait's. MPI's blocking calls
// poll all along (about the whole 300 ms, measured with LOOM_COMM_WAIT=spin); sleeping
// between polls takes a few ms.
TEST(CommWait, WaitingForALatePeerLeavesTheCoreIdle) {
  ProcessGroup& g = world();
  if (g.size() < 2) GTEST_SKIP() << "no peer to wait for on one rank";
  if (comm_wait() == CommWait::Spin) GTEST_SKIP() << "LOOM_COMM_WAIT=spin polls by choice";
  std::vector<float> data(1024, 1.0f);
  const auto late = std::chrono::milliseconds(300);
  g.barrier();
  if (g.rank() != 0) {
    std::this_thread::sleep_for(late);
    g.all_reduce(data.data(), static_cast<int64_t>(data.size()), ReduceOp::Sum);
    EXPECT_EQ(data[5], static_cast<float>(g.size()));
    return;
  }
  const double cpu0 = process_cpu_seconds();
  const auto t0 = Clock::now();
  Work w = g.all_reduce_async(data.data(), static_cast<int64_t>(data.size()), ReduceOp::Sum);
  std::this_thread::sleep_for(late / 2);  // the caller has nothing to do: only the wait may run
  w.wait();
  const double wall = seconds_since(t0), cpu = process_cpu_seconds() - cpu0;
  std::printf("[rank 0] waited %.3f s for a late peer, using %.3f s of CPU\n", wall, cpu);
  EXPECT_EQ(data[5], static_cast<float>(g.size()));
  EXPECT_GT(wall, 0.25);
  EXPECT_LT(cpu, 0.25 * wall);
}

}  // namespace
}  // namespace loom::comm
