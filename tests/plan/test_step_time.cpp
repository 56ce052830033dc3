// The time model: GEMM waves and roofline, the hierarchical all-reduce and the layer's
// collectives against hand-computed cases; then the calibration gate against Narayanan et al.
// 2021 (SC21, table 1): the planner, given the paper's set-up (mixed precision, Adam without
// a distributed optimizer, full recompute, no sequence parallelism), chooses the published
// t and p and predicts TFLOP/s per GPU within 15%.
#include <gtest/gtest.h>

#include "loom/error.hpp"
#include "loom/plan/gemm_cost.hpp"
#include "loom/plan/layout_cost.hpp"

namespace loom::plan {
namespace {

ClusterSpec toy_device() {
  ClusterSpec c;
  c.peak_flops = 1000.0;
  c.gemm_peak_share = 0.5;
  c.memory_bandwidth = 100.0;
  c.compute_units = 4;
  c.tile_m = 2;
  c.tile_n = 2;
  return c;
}

TEST(PlanGemm, WavesAndRoofline) {
  const ClusterSpec c = toy_device();
  // (4, 6): 2 x 3 = 6 tiles on 4 units: 2 waves, 6 of 8 slots busy.
  EXPECT_DOUBLE_EQ(wave_efficiency(Gemm{4, 6, 100}, c), 0.75);
  // (3, 4): 2 x 2 tiles of which 3 x 4 of 16 elements are useful; one full wave.
  EXPECT_DOUBLE_EQ(wave_efficiency(Gemm{3, 4, 100}, c), 0.75);
  // (64, 64, 64): 524288 FLOPs at 1000 x 0.5 (16 x 32 tiles, 128 waves of 4: all busy) =
  // 1048.6 s against 2 x 3 x 4096 bytes / 100 = 245.8 s: compute-bound. (4, 4, 1000): 32000
  // FLOPs = 64 s against 2 (4000 + 4000 + 16) bytes / 100 = 160.3 s: memory-bound.
  EXPECT_DOUBLE_EQ(gemm_seconds(Gemm{64, 64, 64}, c, 2), 2.0 * 64 * 64 * 64 / 500.0);
  EXPECT_DOUBLE_EQ(gemm_seconds(Gemm{4, 4, 1000}, c, 2), 2.0 * (4000 + 4000 + 16) / 100.0);
  // Backward: (64, 64, 64) transposes to the same shape twice.
  EXPECT_DOUBLE_EQ(gemm_backward_seconds(Gemm{64, 64, 64}, c, 2), 2.0 * gemm_seconds(Gemm{64, 64, 64}, c, 2));
}

TEST(PlanStepTime, HierarchicalAllReduce) {
  ClusterSpec c;
  c.intra_node = {1e-6, 1e-9};
  c.inter_node = {1e-5, 1e-8};
  // Inside a node: a ring of 4, 2 (p - 1) alpha + 2 (p - 1)/p n beta.
  EXPECT_DOUBLE_EQ(hierarchical_all_reduce_seconds(1e6, 4, 8, c), 6e-6 + 1.5e-3);
  // 16 ranks, 4 a node: ring of 4 inside (as above), then 4 nodes each moving n / 4.
  EXPECT_DOUBLE_EQ(hierarchical_all_reduce_seconds(1e6, 16, 4, c), 6e-6 + 1.5e-3 + 6e-5 + 1.5 * 0.25e6 * 1e-8);
  EXPECT_DOUBLE_EQ(hierarchical_all_reduce_seconds(1e6, 1, 1, c), 0.0);
}

TEST(PlanStepTime, TensorParallelCollectivesPerLayer) {
  const ModelSpec m{"m", 4, 1024, 16, 512, 1000};
  ClusterSpec c = cluster_preset("dgx-a100");
  Layout l;
  l.tp = 4;
  l.sequence_parallel = false;
  // Each collective half moves (p-1)/p of a (512, 1024) 2-byte activation plus (p-1) alphas.
  const double half = 3 * c.intra_node.alpha_s + 0.75 * 512 * 1024 * 2 * c.intra_node.beta_s_per_byte;
  EXPECT_DOUBLE_EQ(layer_time(m, c, l).forward_tp, 4 * half);   // 2 all-reduces
  EXPECT_DOUBLE_EQ(layer_time(m, c, l).backward_tp, 4 * half);  // 2 all-reduces
  l.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(layer_time(m, c, l).backward_tp, 6 * half);  // + 2 re-gathered inputs
  l.tp = 1;
  EXPECT_EQ(layer_time(m, c, l).forward_tp, 0.0);
}

TEST(PlanStepTime, BubbleIsPMinusOneOverVStageTimes) {
  const ModelSpec m{"m", 8, 1024, 16, 2048, 51200};
  const ClusterSpec c = cluster_preset("dgx-a100");
  const Layout l{4, 2, 2, 2, 1, 1, true, true};
  const LayoutCost cost = predict(m, c, l, 16);
  ASSERT_TRUE(cost.valid) << cost.why_not;
  const LayerTime lt = layer_time(m, c, l);
  const double layer = 2 * lt.forward() + lt.backward();  // recompute runs forward twice
  EXPECT_NEAR(cost.time.bubble_s, (2 - 1) / 2.0 * 4 * layer, 1e-12);
}

// The paper's set-up: Adam without a distributed optimizer (2021), recompute, no sequence
// parallelism.
SearchSpace sc21() {
  SearchSpace s;
  s.zero = 0;
  s.recompute = {true};
  s.sequence_parallel = false;
  return s;
}

const LayoutCost& find(const std::vector<LayoutCost>& ranked, int64_t tp, int64_t pp) {
  for (const LayoutCost& c : ranked)
    if (c.valid && c.layout.tp == tp && c.layout.pp == pp) return c;
  throw Error("no valid layout with tp " + std::to_string(tp) + " pp " + std::to_string(pp));
}

TEST(PlanCalibration, Sc21Gpt1_7bOn32Gpus) {
  const auto ranked = search(model_preset("sc21-1.7b"), cluster_preset("dgx-a100"), 32, 512, sc21());
  ASSERT_TRUE(ranked.front().valid);
  EXPECT_EQ(ranked.front().layout.tp, 1);
  EXPECT_EQ(ranked.front().layout.pp, 1);
  EXPECT_NEAR(ranked.front().flops_per_device / 1e12, 137.0, 0.15 * 137.0);
}

TEST(PlanCalibration, Sc21Gpt145bOn1536Gpus) {
  const ClusterSpec c = cluster_preset("dgx-a100");
  const auto ranked = search(model_preset("sc21-145b"), c, 1536, 2304, sc21());
  const LayoutCost& paper = find(ranked, 8, 8);
  EXPECT_NEAR(paper.flops_per_device / 1e12, 148.0, 0.15 * 148.0);
  // The paper's layout is the best, or within 10% of it and the best of those that leave
  // 10% of the memory free: every faster layout fills more than 90% (a near tie that the
  // memory decides, printed by `loom plan`).
  EXPECT_LE(paper.step_s(), 1.10 * ranked.front().step_s());
  const double usable = static_cast<double>(c.memory_bytes - c.reserved_bytes);
  for (const LayoutCost& other : ranked) {
    if (!other.valid || other.step_s() >= paper.step_s()) continue;
    EXPECT_GT(static_cast<double>(other.memory_bytes()), 0.9 * usable)
        << "tp " << other.layout.tp << " pp " << other.layout.pp << " beats the paper's layout with room to spare";
  }
}

TEST(PlanCalibration, Sc21Gpt1tOn3072GpusHeldOut) {
  // Not used to set any constant: t = 8, p = 64, 163 TFLOP/s per GPU at batch 3072.
  const auto ranked = search(model_preset("sc21-1t"), cluster_preset("dgx-a100"), 3072, 3072, sc21());
  ASSERT_TRUE(ranked.front().valid);
  EXPECT_EQ(ranked.front().layout.tp, 8);
  EXPECT_EQ(ranked.front().layout.pp, 64);
  EXPECT_NEAR(ranked.front().flops_per_device / 1e12, 163.0, 0.15 * 163.0);
}

}  // namespace
}  // namespace loom::plan
