// The planner's cost model: formulas against hand-computed cases, invalid layouts named, and
// the search returning only valid layouts, preferring plain data parallelism when the model
// fits and tensor/pipeline parallelism when it does not.
#include <gtest/gtest.h>

#include <algorithm>

#include "loom/error.hpp"
#include "loom/plan/layout_cost.hpp"

namespace loom::plan {
namespace {

TEST(PlanSpecs, ParametersAndFlopsOfGpt2Small) {
  const ModelSpec m = model_preset("gpt2-small");
  // 12 L h^2 + 13 L h + V h + s h + 2h with L 12, h 768, V 50304, s 1024.
  EXPECT_EQ(m.parameters(), 12 * 12 * 768 * 768 + 13 * 12 * 768 + 50304 * 768 + 1024 * 768 + 2 * 768);
  // Blocks 72 s L h^2 (1 + s/6h), a third more with recompute; the head 6 s h V never recomputed.
  const double blocks = 72.0 * 1024 * 12 * 768.0 * 768 * (1 + 1024.0 / (6 * 768)), head = 6.0 * 1024 * 768 * 50304;
  EXPECT_DOUBLE_EQ(m.flops_per_sequence(false), blocks + head);
  EXPECT_DOUBLE_EQ(m.flops_per_sequence(true), blocks * 4 / 3 + head);
  EXPECT_THROW(model_preset("gpt-5"), Error);
  EXPECT_THROW(cluster_preset("moon"), Error);
}

TEST(PlanCost, MemoryFollowsZeroAndKorthikanti) {
  const ModelSpec m{"m", 8, 1024, 16, 2048, 51200};
  ClusterSpec c = cluster_preset("dgx-a100");
  Layout l;
  l.dp = 4;
  l.tp = 2;
  l.pp = 2;
  l.micro_batch = 1;
  l.recompute = false;
  l.sequence_parallel = false;
  const LayoutCost cost = predict(m, c, l, 16);
  ASSERT_TRUE(cost.valid) << cost.why_not;
  // The first stage, the rank needing the most: the trainer's partition gives it 6 of the 8
  // layers (the LM head costs the last stage 51200 / (12 x 1024) = 4.2 blocks), with the token
  // table split over tp 2 and the position table whole. A block's weights and its qkv and fc
  // biases split over tp, its projections' biases and LayerNorms whole, as the trainer holds them.
  const int64_t block = (12 * 1024 * 1024 + (3 + 4) * 1024) / 2 + (2 + 4) * 1024;
  const int64_t p = 6 * block + 51200 * 1024 / 2 + 2048 * 1024;
  EXPECT_EQ(cost.state_bytes, 4 * p + 12 * p / 4);  // ZeRO-1 over dp 4
  // Korthikanti with t = 2: sbh (10 + 24/t + 5as/(ht)), 6 layers on stage 0, 2 micro-batches
  // in flight there (1F1B, p = 2).
  const double s = 2048, b = 1, h = 1024, a = 16, t = 2;
  EXPECT_NEAR(static_cast<double>(cost.activation_bytes), s * b * h * (10 + 24 / t + 5 * a * s / (h * t)) * 6 * 2, 6.0);
  l.sequence_parallel = true;
  const LayoutCost sp = predict(m, c, l, 16);
  EXPECT_NEAR(static_cast<double>(sp.activation_bytes), s * b * h * (34 + 5 * a * s / h) / t * 6 * 2, 6.0);
  // Selective recompute keeps no probabilities: sbh 34 / t (Korthikanti's Table 2), and its
  // backward runs QK^T and the softmax again.
  Layout selective = l;
  selective.selective_recompute = true;
  const LayoutCost sel = predict(m, c, selective, 16);
  EXPECT_NEAR(static_cast<double>(sel.activation_bytes), s * b * h * 34 / t * 6 * 2, 6.0);
  EXPECT_GT(sel.step_s(), sp.step_s());
  EXPECT_EQ(cost.micro_batches, 4);
}

TEST(PlanCost, InvalidLayoutsAreNamed) {
  const ModelSpec m{"m", 8, 1024, 16, 2048, 51200};
  const ClusterSpec c = cluster_preset("dgx-a100");
  EXPECT_EQ(predict(m, c, Layout{1, 1, 3}, 8).why_not.rfind("heads:", 0), 0u);
  EXPECT_EQ(predict(m, c, Layout{1, 3, 1}, 8).why_not.rfind("layers:", 0), 0u);
  EXPECT_EQ(predict(m, c, Layout{3, 1, 1}, 8).why_not.rfind("batch:", 0), 0u);
  EXPECT_EQ(predict(m, c, Layout{1, 2, 1, 2, 1}, 3).why_not.rfind("interleaving:", 0), 0u);
  const ModelSpec huge = model_preset("gpt3-175b");
  EXPECT_EQ(predict(huge, c, Layout{8, 1, 1}, 8).why_not.rfind("out of memory:", 0), 0u);
}

TEST(PlanSearch, PrefersDataParallelismWhenTheModelFits) {
  // A small model on 8 devices of one node: replicas need no tensor or pipeline splits.
  const std::vector<LayoutCost> ranked = search(model_preset("gpt2-small"), cluster_preset("dgx-a100"), 8, 64);
  ASSERT_FALSE(ranked.empty());
  ASSERT_TRUE(ranked.front().valid);
  EXPECT_EQ(ranked.front().layout.dp, 8);
  bool seen_invalid = false;
  for (const LayoutCost& c : ranked) {
    if (!c.valid) {
      seen_invalid = true;
      continue;
    }
    EXPECT_FALSE(seen_invalid) << "valid layouts come first";
    EXPECT_EQ(c.layout.dp * c.layout.pp * c.layout.tp, 8);
    EXPECT_LE(c.memory_bytes(), cluster_preset("dgx-a100").memory_bytes);
  }
}

TEST(PlanSearch, SplitsTheModelWhenItDoesNotFit) {
  // 175B parameters cannot be replicated: every valid layout uses tensor or pipeline parallelism.
  const std::vector<LayoutCost> ranked = search(model_preset("gpt3-175b"), cluster_preset("dgx-a100"), 1024, 1536);
  ASSERT_TRUE(ranked.front().valid);
  for (const LayoutCost& c : ranked)
    if (c.valid) {
      EXPECT_GT(c.layout.tp * c.layout.pp, 1);
    }
}

// Selective recompute is searched as Korthikanti et al. 2022 use it: GPT-3 175B on 64 A100s
// keeping every activation fits in one layout only (pp 8 x tp 8); not keeping attention's
// probabilities, in more (11 here), and the best of those is faster than both that one and the
// best with full recompute (one more QK^T and softmax, not a whole forward). A small model that
// fits anyway keeps them (selective only costs time), and the search never prices it where it
// changes nothing (Loom's bf16, ring attention) nor, searching both, beside full recompute.
TEST(PlanSearch, TriesSelectiveRecomputeWhereItSavesMemory) {
  const ModelSpec gpt3 = model_preset("gpt3-175b");
  const ClusterSpec a100 = cluster_preset("dgx-a100");
  const auto best = [](const std::vector<LayoutCost>& ranked) {
    EXPECT_TRUE(!ranked.empty() && ranked.front().valid);
    return ranked.front();
  };
  const auto count = [](const std::vector<LayoutCost>& ranked, auto&& pred) {
    return std::count_if(ranked.begin(), ranked.end(), pred);
  };
  const auto valid = [](const LayoutCost& c) { return c.valid; };
  SearchSpace kept, without_full, full;
  kept.recompute = without_full.recompute = {false};
  kept.selective_recompute = {false};
  full.recompute = {true};
  const std::vector<LayoutCost> all_kept = search(gpt3, a100, 64, 64, kept);
  const std::vector<LayoutCost> selective = search(gpt3, a100, 64, 64, without_full);
  EXPECT_GT(count(selective, valid), count(all_kept, valid));
  EXPECT_TRUE(best(selective).layout.selective_recompute);
  EXPECT_LT(best(selective).step_s(), best(all_kept).step_s());
  const LayoutCost recomputed = best(search(gpt3, a100, 64, 64, full));
  EXPECT_FALSE(recomputed.layout.selective_recompute);
  EXPECT_LT(best(selective).step_s(), recomputed.step_s());
  EXPECT_TRUE(best(search(gpt3, a100, 64, 64)).layout.selective_recompute);

  const std::vector<LayoutCost> small = search(model_preset("gpt2-small"), a100, 8, 64);
  EXPECT_FALSE(best(small).layout.selective_recompute);
  EXPECT_GT(count(small, [](const LayoutCost& c) { return c.layout.selective_recompute; }), 0);
  EXPECT_EQ(count(small, [](const LayoutCost& c) { return c.layout.selective_recompute && c.layout.recompute; }), 0);
  ClusterSpec bf16 = a100;
  bf16.precision = Precision::Bf16;
  EXPECT_EQ(count(search(gpt3, bf16, 64, 64), [](const LayoutCost& c) { return c.layout.selective_recompute; }), 0);
  ModelSpec long_context = model_preset("gpt2-small");
  long_context.seq = 8192;
  EXPECT_EQ(count(search(long_context, a100, 8, 8),
                  [](const LayoutCost& c) { return c.layout.selective_recompute && c.layout.cp > 1; }),
            0);
  // Asked for alone, it is priced on every layout where it changes anything, full recompute's too.
  SearchSpace forced;
  forced.selective_recompute = {true};
  const std::vector<LayoutCost> all = search(model_preset("gpt2-small"), a100, 8, 64, forced);
  EXPECT_EQ(count(all, [](const LayoutCost& c) { return !c.layout.selective_recompute && c.layout.cp == 1; }), 0);
  EXPECT_GT(count(all, [](const LayoutCost& c) { return c.layout.selective_recompute && c.layout.recompute; }), 0);
}

}  // namespace
}  // namespace loom::plan
