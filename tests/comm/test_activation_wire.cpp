// The activation wire (comm/activation_wire.hpp): in fp32 the group's own collectives and
// transfers, bit for bit; in bf16 every value arrives rounded to bf16 (a gather, an
// all-to-all, a ring hop), sums add bf16 values, and the counters count 2 bytes a value.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "comm/mpi_test_env.hpp"
#include "loom/comm/activation_wire.hpp"

namespace loom::comm {
namespace {

using loom::testing::world;

// A value of rank r, element i whose fp32 bits do not survive bf16 (1 + 2^-10 + ...).
float value(int r, int64_t i) { return 1.0f + static_cast<float>(r) + (1.0f + static_cast<float>(i)) / 1024.0f / 3.0f; }
float rounded(float x) { return to_f32(to_bf16(x)); }

class ActivationWire : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { world().set_activation_dtype(GetParam()); }
  void TearDown() override { world().set_activation_dtype(DType::F32); }
  bool bf16() const { return GetParam() == DType::BF16; }
  float on_wire(float x) const { return bf16() ? rounded(x) : x; }
};

TEST_P(ActivationWire, GatherSumReduceScatterAndAllToAllArriveInTheWiresPrecision) {
  ProcessGroup& g = world();
  const int P = g.size(), r = g.rank();
  const int64_t n = 5;
  Tensor mine = Tensor::empty({n});
  for (int64_t i = 0; i < n; ++i) mine.f32()[i] = value(r, i);
  g.reset_stats();
  Tensor all = Tensor::empty({P * n});
  gather_activations(g, mine, all);
  for (int q = 0; q < P; ++q)
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(all.f32()[q * n + i], on_wire(value(q, i))) << q << " " << i;
  EXPECT_EQ(g.stats().bytes, (bf16() ? 2 : 4) * P * n);

  // A sum over ranks: in bf16 each value and each partial sum rounded once, so within P
  // roundings (2^-9 relative each) of the fp32 sum; bound 2^-8 P.
  Tensor sum = mine.clone();
  sum_activations(g, sum);
  for (int64_t i = 0; i < n; ++i) {
    float want = 0.0f;
    for (int q = 0; q < P; ++q) want += value(q, i);
    EXPECT_NEAR(sum.f32()[i], want, bf16() ? P * want / 256.0f : 1e-5f * want) << i;
  }

  // Reduce-scatter: chunk r of the sum of everyone's (P x n) buffer.
  Tensor blocks = Tensor::empty({P * n}), chunk = Tensor::empty({n});
  for (int q = 0; q < P; ++q)
    for (int64_t i = 0; i < n; ++i) blocks.f32()[q * n + i] = value(r, q * n + i);
  reduce_scatter_activations(g, blocks, chunk);
  for (int64_t i = 0; i < n; ++i) {
    float want = 0.0f;
    for (int q = 0; q < P; ++q) want += value(q, r * n + i);
    EXPECT_NEAR(chunk.f32()[i], want, bf16() ? P * want / 256.0f : 1e-5f * want) << i;
  }

  // All-to-all: block q (one value per receiver) goes to rank q, exactly as rounded.
  std::vector<int64_t> counts(static_cast<size_t>(P), 1);
  Tensor out = Tensor::empty({P});
  Tensor in = Tensor::empty({P});
  for (int q = 0; q < P; ++q) in.f32()[q] = value(r, q);
  all_to_all_v_activations(g, in, counts, out, counts);
  for (int q = 0; q < P; ++q) EXPECT_EQ(out.f32()[q], on_wire(value(q, r))) << q;
}

TEST_P(ActivationWire, RingTransfersArriveRoundedAndCountTheirBytes) {
  ProcessGroup& g = world();
  const int P = g.size(), r = g.rank();
  if (P < 2) GTEST_SKIP() << "a ring needs 2 ranks";
  const int64_t n = 7;
  std::vector<float> out(static_cast<size_t>(n)), in(static_cast<size_t>(n), 0.0f);
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = value(r, i);
  g.reset_stats();
  Work send = send_activations_async(g, out.data(), n, (r + 1) % P, 5);
  Work recv = recv_activations_async(g, in.data(), n, (r + P - 1) % P, 5);
  send.wait();
  recv.wait();
  const int from = (r + P - 1) % P;
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(in[static_cast<size_t>(i)], on_wire(value(from, i))) << i;
  EXPECT_EQ(g.stats().sent_bytes, activation_wire_bytes(g, n));
  EXPECT_EQ(activation_wire_bytes(g, n), (bf16() ? 2 : 4) * n);
}

// A gather queued behind another group's sum (gather_activations_after) reads the summed
// values, never the ones before the sum, though neither caller waits for the sum: rank 0
// issues both 100 ms late, so on the other ranks a gather that did not wait for its sum
// would have sent their own unsummed values by the time rank 0 joins.
TEST_P(ActivationWire, AGatherQueuedBehindASumGathersTheSum) {
  if (world().size() < 2) GTEST_SKIP() << "needs 2 ranks";
  ProcessGroup other(MPI_COMM_WORLD, "other");
  other.set_activation_dtype(GetParam());
  const int P = world().size(), r = world().rank();
  const int64_t n = 7;
  Tensor mine = Tensor::empty({n}), all = Tensor::empty({P * n});
  for (int64_t i = 0; i < n; ++i) mine.f32()[i] = value(r, i);
  if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  Work sum = sum_activations_async(world(), mine.f32(), n);
  Work gather = gather_activations_after(other, sum, mine.f32(), all.f32(), n);
  gather.wait();
  sum.wait();
  for (int q = 0; q < P; ++q)  // every rank's sum is the same bits: each block is this rank's sum
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(all.f32()[q * n + i], on_wire(mine.f32()[i])) << q << " " << i;
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ActivationWire, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(info.param == DType::BF16 ? "bf16" : "fp32"); });

}  // namespace
}  // namespace loom::comm
