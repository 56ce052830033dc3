// Every collective and every all-reduce algorithm against a serially computed result: each
// rank can regenerate every other rank's random input from its seed, so the expected
// reduction is computed locally in double. Odd sizes, 0 and 1 elements, any rank count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "comm/mpi_test_env.hpp"
#include "loom/error.hpp"
#include "test_util.hpp"

namespace loom::comm {
namespace {

using loom::testing::all_close;
using loom::testing::random_vector;
using loom::testing::world;

const std::vector<int64_t> kSizes{0, 1, 2, 7, 13, 1000, 4099};

std::vector<float> input_of(int rank, int64_t n, uint64_t salt = 0) {
  return random_vector(n, 1000 * (salt + 1) + static_cast<uint64_t>(rank), -1.0f, 1.0f);
}

std::vector<float> expected_reduction(int64_t n, ReduceOp op, int p, uint64_t salt = 0) {
  std::vector<double> acc(static_cast<size_t>(n), op == ReduceOp::Max ? -1e30 : 0.0);
  for (int q = 0; q < p; ++q) {
    const std::vector<float> x = input_of(q, n, salt);
    for (int64_t i = 0; i < n; ++i) acc[i] = op == ReduceOp::Max ? std::max(acc[i], double{x[i]}) : acc[i] + x[i];
  }
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(op == ReduceOp::Avg ? acc[i] / p : acc[i]);
  return out;
}

class AllReduce : public ::testing::TestWithParam<AllReduceAlgorithm> {};

TEST_P(AllReduce, MatchesSerialSumAvgMaxForEverySize) {
  ProcessGroup& g = world();
  g.set_param_servers(std::max(1, g.size() / 2));  // sharded servers when there are several ranks
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
    for (int64_t n : kSizes) {
      std::vector<float> x = input_of(g.rank(), n);
      g.all_reduce(x.data(), n, op, GetParam());
      const std::string what = algorithm_name(GetParam()) + " " + reduce_op_name(op) + " n=" + std::to_string(n);
      EXPECT_TRUE(all_close(x, expected_reduction(n, op, g.size()), 1e-5, 1e-5, what));
    }
  }
}

TEST_P(AllReduce, AsyncHandlesCompleteInOrder) {
  ProcessGroup& g = world();
  std::vector<std::vector<float>> xs;
  for (uint64_t salt = 0; salt < 4; ++salt) xs.push_back(input_of(g.rank(), 257, salt));
  std::vector<Work> works;
  for (auto& x : xs) works.push_back(g.all_reduce_async(x.data(), 257, ReduceOp::Sum, GetParam()));
  for (auto& w : works) w.wait();
  for (uint64_t salt = 0; salt < 4; ++salt)
    EXPECT_TRUE(all_close(xs[salt], expected_reduction(257, ReduceOp::Sum, g.size(), salt), 1e-5, 1e-5));
  EXPECT_TRUE(works.back().is_done());
}

INSTANTIATE_TEST_SUITE_P(Algorithms, AllReduce,
                         ::testing::Values(AllReduceAlgorithm::Mpi, AllReduceAlgorithm::Ring, AllReduceAlgorithm::Tree,
                                           AllReduceAlgorithm::Rhd, AllReduceAlgorithm::ParamServer),
                         [](const auto& info) {
                           std::string n = algorithm_name(info.param);
                           n.erase(std::remove(n.begin(), n.end(), '-'), n.end());
                           return n;
                         });

class ScatterGather : public ::testing::TestWithParam<AllReduceAlgorithm> {};

TEST_P(ScatterGather, ReduceScatterThenAllGatherIsAllReduce) {
  ProcessGroup& g = world();
  const int p = g.size();
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{333}}) {  // elements per rank
    const std::vector<float> in = input_of(g.rank(), n * p);
    std::vector<float> shard(static_cast<size_t>(n)), full(static_cast<size_t>(n * p));
    g.reduce_scatter_async(in.data(), shard.data(), n, ReduceOp::Sum, GetParam()).wait();
    const std::vector<float> want = expected_reduction(n * p, ReduceOp::Sum, p);
    EXPECT_TRUE(all_close(shard.data(), want.data() + g.rank() * n, n, 1e-5, 1e-5, "reduce_scatter"));
    g.all_gather_async(shard.data(), full.data(), n, GetParam()).wait();
    EXPECT_TRUE(all_close(full, want, 1e-5, 1e-5, "all_gather"));
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, ScatterGather, ::testing::Values(AllReduceAlgorithm::Mpi, AllReduceAlgorithm::Ring),
                         [](const auto& info) { return algorithm_name(info.param); });

// Mixed precision on the wire. Small integers are exact in bf16 and so are their sums up to
// 256: those results must be exact. Random values: each element is rounded to bf16 once when
// sent and each of the p - 1 additions rounds its sum once, every rounding at most 2^-8 (half
// of bf16's 2^-7 spacing) of a value no larger than the sum of the magnitudes, so the bound is
// p 2^-8 sum_q |x_q|.
TEST(Collectives, Bf16WireReductionsAndGatherHalveTheBytes) {
  ProcessGroup& g = world();
  const int p = g.size();
  const int64_t n = 1001;
  auto small_integers = [&](int rank, int64_t count) {
    std::vector<float> x(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) x[i] = static_cast<float>(rank + 1 + i % 7);
    return x;
  };
  std::vector<float> want_sum(static_cast<size_t>(n * p), 0.0f), magnitude(static_cast<size_t>(n * p), 0.0f);
  for (int q = 0; q < p; ++q) {
    const std::vector<float> x = small_integers(q, n * p), r = input_of(q, n * p, 9);
    for (int64_t i = 0; i < n * p; ++i) {
      want_sum[i] += x[i];
      magnitude[i] += std::fabs(r[i]);
    }
  }
  g.reset_stats();
  std::vector<float> x = small_integers(g.rank(), n);
  g.all_reduce_bf16_async(x.data(), n, ReduceOp::Sum).wait();
  EXPECT_EQ(x, std::vector<float>(want_sum.begin(), want_sum.begin() + n)) << "bf16 all-reduce of integers";
  EXPECT_EQ(g.stats().bytes, 2 * n) << "an all-reduce of n values in bf16 moves a 2n-byte tensor";

  g.reset_stats();
  std::vector<float> full = small_integers(g.rank(), n * p), shard(static_cast<size_t>(n));
  g.reduce_scatter_bf16_async(full.data(), shard.data(), n, ReduceOp::Avg).wait();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(shard[i], want_sum[g.rank() * n + i] / static_cast<float>(p)) << i;
  // In place, as ZeRO reduces (this rank's chunk of the buffer receives its result).
  std::vector<float> random = input_of(g.rank(), n * p, 9);
  float* chunk = random.data() + g.rank() * n;
  g.reduce_scatter_bf16_async(random.data(), chunk, n, ReduceOp::Sum).wait();
  const std::vector<float> exact = expected_reduction(n * p, ReduceOp::Sum, p, 9);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = g.rank() * n + i;
    ASSERT_LE(std::fabs(chunk[i] - exact[k]), p * std::ldexp(1.0f, -8) * magnitude[k] + 1e-7f) << "element " << k;
  }
  EXPECT_EQ(g.stats().bytes, 2 * (2 * n * p)) << "two reduce-scatters of n x p bf16 values";

  g.reset_stats();
  std::vector<bfloat16> mine(static_cast<size_t>(n)), gathered(static_cast<size_t>(n * p));
  for (int64_t i = 0; i < n; ++i) mine[i] = to_bf16(static_cast<float>(g.rank() * 16 + i % 16));
  g.all_gather_bf16_async(mine.data(), gathered.data(), n).wait();
  for (int q = 0; q < p; ++q)
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(to_f32(gathered[q * n + i]), static_cast<float>(q * 16 + i % 16));
  EXPECT_EQ(g.stats().bytes, 2 * n * p);
}

TEST(Collectives, BroadcastFromEveryRoot) {
  ProcessGroup& g = world();
  for (int root = 0; root < g.size(); ++root) {
    Tensor t = Tensor::empty({3, 5});
    const std::vector<float> mine = input_of(g.rank(), 15);
    std::copy(mine.begin(), mine.end(), t.f32());
    g.broadcast(t, root);
    EXPECT_TRUE(all_close(t.f32(), input_of(root, 15).data(), 15, 0, 0, "broadcast root " + std::to_string(root)));
  }
}

TEST(Collectives, ReduceToRoot) {
  ProcessGroup& g = world();
  const int root = g.size() - 1;
  Tensor t = Tensor::empty({11});
  const std::vector<float> mine = input_of(g.rank(), 11);
  std::copy(mine.begin(), mine.end(), t.f32());
  g.reduce(t, root, ReduceOp::Avg);
  if (g.rank() == root) {
    EXPECT_TRUE(all_close(t.f32(), expected_reduction(11, ReduceOp::Avg, g.size()).data(), 11, 1e-5, 1e-5));
  }
  else EXPECT_TRUE(all_close(t.f32(), mine.data(), 11, 0, 0, "non-root unchanged"));
}

TEST(Collectives, AllToAllEvenAndUneven) {
  ProcessGroup& g = world();
  const int p = g.size(), r = g.rank();
  // Even: block q of rank r holds 100 r + q.
  std::vector<float> in(static_cast<size_t>(2 * p)), out(static_cast<size_t>(2 * p));
  for (int q = 0; q < p; ++q) in[2 * q] = in[2 * q + 1] = static_cast<float>(100 * r + q);
  g.all_to_all_async(in.data(), out.data(), 2).wait();
  for (int q = 0; q < p; ++q) EXPECT_EQ(out[2 * q], static_cast<float>(100 * q + r));
  // Uneven: rank r sends q + 1 copies of (100 r + q) to rank q, so receives r + 1 from each.
  std::vector<int64_t> send_counts(p), recv_counts(p, r + 1);
  std::vector<float> vin;
  for (int q = 0; q < p; ++q) {
    send_counts[q] = q + 1;
    vin.insert(vin.end(), q + 1, static_cast<float>(100 * r + q));
  }
  std::vector<float> vout(static_cast<size_t>(p * (r + 1)), -1.0f);
  g.all_to_all_v_async(vin.data(), send_counts, vout.data(), recv_counts).wait();
  for (int q = 0; q < p; ++q)
    for (int k = 0; k <= r; ++k) EXPECT_EQ(vout[q * (r + 1) + k], static_cast<float>(100 * q + r));
  // The same through the Tensor forms, which check the sizes.
  Tensor tin = Tensor::empty({static_cast<int64_t>(vin.size())}), tout = Tensor::empty({p * (r + 1)});
  std::copy(vin.begin(), vin.end(), tin.f32());
  g.all_to_all_v(tin, send_counts, tout, recv_counts);
  EXPECT_TRUE(all_close(tout.f32(), vout.data(), tout.numel(), 0, 0, "all_to_all_v (tensors)"));
  Tensor ein = Tensor::empty({2 * p}), eout = Tensor::empty({2 * p});
  std::copy(in.begin(), in.end(), ein.f32());
  g.all_to_all(ein, eout);
  EXPECT_TRUE(all_close(eout.f32(), out.data(), 2 * p, 0, 0, "all_to_all (tensors)"));
  Tensor wrong = Tensor::empty({2 * p + 1});
  EXPECT_THROW(g.all_to_all(ein, wrong), Error);  // output size differs from the input's
}

TEST(Collectives, SendRecvAroundTheRing) {
  ProcessGroup& g = world();
  const int p = g.size(), r = g.rank();
  Tensor out = Tensor::empty({9}), in = Tensor::empty({9});
  out.fill_(static_cast<float>(r));
  // Post the receive first, then the send: non-blocking, so any order works.
  Work rw = g.recv_async(in.f32(), 9, (r + p - 1) % p, 7);
  Work sw = g.send_async(out.f32(), 9, (r + 1) % p, 7);
  sw.wait();
  rw.wait();
  EXPECT_EQ(in.f32()[8], static_cast<float>((r + p - 1) % p));
  g.barrier();
}

TEST(Collectives, BadArgumentsAreErrorsOnTheCallingRank) {
  ProcessGroup& g = world();
  EXPECT_THROW(g.broadcast_async(nullptr, 0, g.size()), Error);
  EXPECT_THROW(g.send_async(nullptr, 0, -1), Error);
  EXPECT_THROW(g.reduce_scatter_async(nullptr, nullptr, 0, ReduceOp::Sum, AllReduceAlgorithm::Tree), Error);
  EXPECT_THROW(parse_algorithm("butterfly"), Error);
  EXPECT_EQ(parse_algorithm("param-server"), AllReduceAlgorithm::ParamServer);
}

}  // namespace
}  // namespace loom::comm
