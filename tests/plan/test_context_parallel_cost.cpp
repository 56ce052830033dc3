// The planner's cp axis: the ring's hop count and exposed time against hand-counted cases,
// activation memory per device falling as 1/cp, a sequence 2 cp does not divide named, and
// the search trying cp only for long sequences (where it wins on memory).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "loom/parallel/context_parallel/head_groups.hpp"
#include "loom/plan/context_parallel_cost.hpp"
#include "loom/plan/layout_cost.hpp"

namespace loom::plan {
namespace {

TEST(PlanContextParallel, HopsAndBytesOfTheRing) {
  EXPECT_EQ(ring_hops_per_layer(1, true), 0);
  // cp 2: forward 1 K/V hop; backward 1 K/V + 2 dK/dV; recompute one more forward hop.
  EXPECT_EQ(ring_hops_per_layer(2, false), 4);
  EXPECT_EQ(ring_hops_per_layer(2, true), 5);
  EXPECT_EQ(ring_hops_per_layer(4, false), 3 + 7);
  const RingShape s{.B = 2, .T = 64, .C = 16, .L = 3, .M = 2, .tp = 2, .value_bytes = 4};
  EXPECT_EQ(ring_hop_bytes(s, 4), 2 * 16 * 2 * 8 * 4);  // B x T/cp rows of 2C/tp floats
  EXPECT_EQ(ring_bytes_per_step(s, 4), 2 * 3 * 10 * ring_hop_bytes(s, 4));
  EXPECT_EQ(ring_bytes_per_step(s, 1), 0);
}

TEST(PlanContextParallel, BlockComputeHidesAllButTheLastGradientHop) {
  // Compute much longer than a hop: only the final dK/dV hop to its owner is exposed.
  RingTime t = ring_layer_time(4, 1.0, 100.0, 200.0);
  EXPECT_DOUBLE_EQ(t.forward_link_s, 3.0);
  EXPECT_DOUBLE_EQ(t.backward_link_s, 7.0);
  EXPECT_DOUBLE_EQ(t.forward_exposed_s, 0.0);
  EXPECT_DOUBLE_EQ(t.backward_exposed_s, 1.0);
  // No compute: everything exposed, two hops at once on the link count twice.
  t = ring_layer_time(4, 1.0, 0.0, 0.0);
  EXPECT_DOUBLE_EQ(t.forward_exposed_s, 3.0);
  EXPECT_DOUBLE_EQ(t.backward_exposed_s, 1.0 + 2.0 + 2.0 + 1.0 + 1.0);
  // Per-step compute of 1.5 hops (forward 6 / cp 4): forward hidden; backward (12 / 4 = 3)
  // hides the two hops of steps 1 and 2 (2 < 3), the last hop exposed.
  t = ring_layer_time(4, 1.0, 6.0, 12.0);
  EXPECT_DOUBLE_EQ(t.forward_exposed_s, 0.0);
  EXPECT_DOUBLE_EQ(t.backward_exposed_s, 1.0);
  t = ring_layer_time(2, 1.0, 1.0, 1.0);  // steps of 0.5 s: half of each hop exposed
  EXPECT_DOUBLE_EQ(t.forward_exposed_s, 0.5);
  EXPECT_DOUBLE_EQ(t.backward_exposed_s, 0.5 + 0.5 + 1.0);
}

TEST(PlanContextParallel, ActivationsPerDeviceScaleAsOneOverCp) {
  const ModelSpec m{"m", 4, 1024, 16, 16384, 51200};
  for (Precision precision : {Precision::Mixed, Precision::Fp32}) {
    ClusterSpec c = cluster_preset("dgx-a100");
    c.precision = precision;
    c.memory_bytes = int64_t{1} << 50;  // everything fits: compare the activations
    Layout l;
    l.dp = 1;
    l.recompute = false;
    l.sequence_parallel = false;
    const LayoutCost one = predict(m, c, l, 1);
    l.cp = 2;
    const LayoutCost two = predict(m, c, l, 1);
    l.cp = 4;
    const LayoutCost four = predict(m, c, l, 1);
    ASSERT_TRUE(one.valid && two.valid && four.valid);
    // Every term is per token once the probabilities (s^2) are gone: exactly 1/cp between cp
    // degrees (up to rounding to whole bytes), and less than half the serial's at cp 2. But for
    // Loom's ring attention scratch while one layer runs (fp32): a block's scores and their
    // gradient, (s / 2cp)^2 values each per head of a group (6C / (s / 2cp) heads: 1 at cp 2,
    // 3 at cp 4).
    auto ring = [&](int64_t cp) {
      const int64_t Tc = 16384 / (2 * cp);
      return precision == Precision::Mixed
                 ? 0.0
                 : 2.0 * 4.0 * static_cast<double>(parallel::cp::heads_per_group(Tc, 1024, 16)) * std::pow(Tc, 2.0);
    };
    EXPECT_NEAR(static_cast<double>(two.activation_bytes) - ring(2),
                2.0 * (static_cast<double>(four.activation_bytes) - ring(4)), 2.0);
    EXPECT_LT(2 * two.activation_bytes, one.activation_bytes);
    EXPECT_EQ(two.state_bytes, one.state_bytes);
    // The ring is priced, and the gradients are reduced over cp.
    EXPECT_GT(two.time.cp_link_s, 0.0);
    EXPECT_GE(two.time.cp_link_s, two.time.cp_comm_s);
    EXPECT_GT(two.time.dp_comm_s + two.time.cp_comm_s, 0.0);
    EXPECT_EQ(one.time.cp_link_s, 0.0);
  }
}

TEST(PlanContextParallel, ASequenceTwoCpDoesNotDivideIsNamed) {
  const ModelSpec m{"m", 4, 1024, 16, 4100, 51200};
  Layout l;
  l.dp = 1;
  l.cp = 4;
  EXPECT_EQ(predict(m, cluster_preset("dgx-a100"), l, 1).why_not.rfind("sequence:", 0), 0u);
}

TEST(PlanContextParallel, SearchTriesCpForLongSequencesAndPicksItWhenTheyDoNotFitOtherwise) {
  ModelSpec m = model_preset("gpt3-1.3b");
  const ClusterSpec c = cluster_preset("dgx-a100");
  EXPECT_EQ(context_parallel_degrees(m, 8, {}), std::vector<int64_t>{1});  // 2048 tokens: not tried
  for (const LayoutCost& l : search(m, c, 8, 8)) EXPECT_EQ(l.layout.cp, 1);
  m.seq = 32768;
  EXPECT_EQ(context_parallel_degrees(m, 8, {}), (std::vector<int64_t>{1, 2, 4, 8}));
  const std::vector<LayoutCost> ranked = search(m, c, 8, 8);
  ASSERT_TRUE(!ranked.empty() && ranked.front().valid);
  EXPECT_GT(ranked.front().layout.cp, 1) << "32k tokens: the s^2 probabilities do not fit without cp";
  for (const LayoutCost& l : ranked)
    if (l.valid) {
      EXPECT_EQ(l.layout.dp * l.layout.pp * l.layout.tp * l.layout.cp, 8);
    }
}

}  // namespace
}  // namespace loom::plan
