// The emulated link's prices against the alpha-beta closed forms (algorithms.hpp), which
// they equal when every chunk is even, and the uneven chunks they wait for otherwise.
#include <gtest/gtest.h>

#include "loom/comm/emulated_link.hpp"

namespace loom::comm {
namespace {

constexpr double kAlpha = 1e-5, kBeta = 1e-9;  // seconds, seconds per byte
const EmulatedLink kLink{kAlpha, kBeta};

double ring_closed_form(double bytes, int p) { return 2.0 * (p - 1) * kAlpha + 2.0 * (p - 1) / p * bytes * kBeta; }

TEST(EmulatedLinkCost, EvenChunksCostTheClosedForms) {
  const int64_t n = 1 << 12;  // floats: every chunk even for p = 2, 4, 8
  const double bytes = 4.0 * n;
  for (int p : {2, 4, 8}) {
    EXPECT_DOUBLE_EQ(emulated_all_reduce_seconds(kLink, AllReduceAlgorithm::Ring, n, p), ring_closed_form(bytes, p));
    EXPECT_DOUBLE_EQ(emulated_all_reduce_seconds(kLink, AllReduceAlgorithm::Mpi, n, p), ring_closed_form(bytes, p));
    EXPECT_DOUBLE_EQ(emulated_ring_half_seconds(kLink, n, p), 0.5 * ring_closed_form(bytes, p));
    int log2p = 0;
    while ((1 << log2p) < p) ++log2p;
    EXPECT_DOUBLE_EQ(emulated_all_reduce_seconds(kLink, AllReduceAlgorithm::Tree, n, p), 2.0 * log2p * (kAlpha + bytes * kBeta));
    EXPECT_DOUBLE_EQ(emulated_all_reduce_seconds(kLink, AllReduceAlgorithm::Rhd, n, p),
                     2.0 * log2p * kAlpha + 2.0 * (p - 1) / p * bytes * kBeta);
    EXPECT_DOUBLE_EQ(emulated_all_reduce_seconds(kLink, AllReduceAlgorithm::ParamServer, n, p, 2),
                     2.0 * (p - 1) * (kAlpha + bytes / 2 * kBeta));
  }
  // rhd on 6 ranks: the 4-rank core plus folding 2 ranks in and out.
  EXPECT_DOUBLE_EQ(emulated_all_reduce_seconds(kLink, AllReduceAlgorithm::Rhd, n, 6),
                   4 * kAlpha + 1.5 * bytes * kBeta + 2 * (kAlpha + bytes * kBeta));
}

TEST(EmulatedLinkCost, UnevenChunksWaitForTheLargest) {
  // 10 floats on 4 ranks: chunks of 2, 3, 2, 3; each of the 3 steps waits for a 3.
  EXPECT_DOUBLE_EQ(emulated_ring_half_seconds(kLink, 10, 4), 3 * (kAlpha + 12 * kBeta));
  EXPECT_GT(emulated_all_reduce_seconds(kLink, AllReduceAlgorithm::Ring, 10, 4), ring_closed_form(40, 4));
}

TEST(EmulatedLinkCost, Bf16ElementsCostTheirTwoBytes) {
  const int64_t n = 1 << 12;
  for (int p : {2, 4, 8}) {
    EXPECT_DOUBLE_EQ(emulated_all_reduce_seconds(kLink, AllReduceAlgorithm::Mpi, n, p, 1, 2), ring_closed_form(2.0 * n, p));
    EXPECT_DOUBLE_EQ(emulated_ring_half_seconds(kLink, n, p, 2), 0.5 * ring_closed_form(2.0 * n, p));
  }
}

TEST(EmulatedLinkCost, OffOrOneRankCostsNothing) {
  EXPECT_FALSE(emulated_link(0.0, 50.0).on());
  EXPECT_DOUBLE_EQ(emulated_all_reduce_seconds(emulated_link(0.0, 50.0), AllReduceAlgorithm::Tree, 1000, 4), 0.0);
  EXPECT_DOUBLE_EQ(emulated_all_reduce_seconds(kLink, AllReduceAlgorithm::Ring, 1000, 1), 0.0);
  const EmulatedLink gigabit = emulated_link(1.0, 50.0);
  EXPECT_DOUBLE_EQ(gigabit.alpha_s, 50e-6);
  EXPECT_DOUBLE_EQ(gigabit.beta_s_per_byte, 8e-9);
}

}  // namespace
}  // namespace loom::comm
