// Mixed precision in the planner (`loom plan --precision bf16`): the model-state formulas of
// each ZeRO stage (plan/mixed_precision_cost.hpp) against the published ones, a layout priced
// by hand, and the prediction against the memory tracker's peak over a bf16 training step.
#include <gtest/gtest.h>

#include "loom/plan/layout_cost.hpp"
#include "loom/plan/mixed_precision_cost.hpp"
#include "loom/train/trainer.hpp"
#include "tiny_config.hpp"

namespace loom::plan {
namespace {

TEST(MixedPrecisionState, PublishedFormulasWhenEveryParameterIsBf16) {
  // Psi_32 = 0: 18 Psi, 6 Psi + 12 Psi / N, 2 Psi + 16 Psi / N, 18 Psi / N (ZeRO, table 1's
  // K = 12 plus 2 bytes of fp32 gradients beyond fp16 ones).
  const int64_t P = 1 << 20, N = 4;
  EXPECT_EQ(mixed_precision_state_bytes(P, 0, N, 0, 8).total(), 18 * P);
  EXPECT_EQ(mixed_precision_state_bytes(P, 0, N, 1, 8).total(), 6 * P + 12 * P / N);
  EXPECT_EQ(mixed_precision_state_bytes(P, 0, N, 2, 8).total(), 2 * P + 16 * P / N);
  EXPECT_EQ(mixed_precision_state_bytes(P, 0, N, 3, 8).total(), 18 * P / N);
  // Parameters read outside GEMMs keep 4 more bytes each under ZeRO-1/2 only.
  EXPECT_EQ(mixed_precision_state_bytes(P, 1000, N, 1, 8).total(), 6 * P + 12 * P / N + 4000);
  EXPECT_EQ(mixed_precision_state_bytes(P, 1000, N, 0, 8).total(), 18 * P);
  EXPECT_EQ(mixed_precision_state_bytes(P, 1000, N, 3, 8).total(), 18 * P / N);
}

ClusterSpec cpu_bf16() {
  ClusterSpec c = cluster_preset("local-default");
  c.precision = Precision::Bf16;
  return c;
}

Layout serial(int64_t micro_batch) {
  Layout l;
  l.micro_batch = micro_batch;
  l.recompute = false;
  l.sequence_parallel = false;
  return l;
}

TEST(PlanBf16, MemoryOfASerialLayoutByHand) {
  const ModelSpec m{"m", 4, 128, 4, 128, 128};
  Layout l = serial(8);
  ClusterSpec fp32 = cluster_preset("local-default");
  const LayoutCost c = predict(m, cpu_bf16(), l, 8), f = predict(m, fp32, l, 8);
  ASSERT_TRUE(c.valid) << c.why_not;
  const int64_t P = 12 * 4 * 128 * 128 + 13 * 4 * 128 + 128 * 128 + 128 * 128 + 2 * 128;
  EXPECT_EQ(c.state_bytes, 18 * P);
  // Each layer keeps its four Linear inputs in bf16: 2 bytes less on (B T C) x (1 + 1 + 1 + 4).
  const int64_t B = 8, T = 128, C = 128;
  EXPECT_EQ(f.activation_bytes - c.activation_bytes, 4 * 2 * 7 * B * T * C);
  // ZeRO-1 over dp 2: bf16 weights, the Linear weights' fp32 values dropped, master and moments sharded.
  l.dp = 2;
  l.micro_batch = 4;
  l.zero = 1;
  const int64_t linear = 4 * 12 * 128 * 128;
  EXPECT_EQ(predict(m, cpu_bf16(), l, 8).state_bytes, 2 * P + 4 * (P - linear) + 4 * P + 12 * P / 2);
}

TEST(PlanBf16, PredictsTheTrackedPeakOfASerialBf16Step) {
  train::TrainConfig t = testing::tiny_config();
  t.model.n_embd = 64;
  t.model.n_head = 4;
  t.model.block_size = 64;
  t.batch_size = 4;
  t.steps = 1;
  t.precision = "bf16";
  MemoryTracker& tracker = MemoryTracker::instance();
  const int64_t before = tracker.total_current();
  tracker.reset_peaks();
  train::Trainer trainer(t, true);
  trainer.train_step();
  const int64_t measured = tracker.total_peak() - before;
  const ModelSpec m{"m", 2, 64, 4, 64, 128};  // the character vocabulary (65) padded to 128 rows
  const LayoutCost c = predict(m, cpu_bf16(), serial(4), 4);
  EXPECT_NEAR(static_cast<double>(c.memory_bytes()), static_cast<double>(measured), 0.10 * measured)
      << "predicted " << c.memory_bytes() << " measured " << measured;
}

}  // namespace
}  // namespace loom::plan
