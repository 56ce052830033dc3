// The planner prices the pipeline rank needing the most as the trainer builds and runs it: the
// blocks each rank owns (the trainer's partition, the LM head's cost on the last stage), the
// mixtures of experts among them, the head on the last stage, and the (micro-batch, chunk) pairs
// its schedule holds at once. Its memory for a layout is the memory check's (what `loom train
// --dry-run` prints; test_pipeline.cpp's EachRanksActivationPeakIsTheMemoryChecksFigure holds
// that to each rank's tracker within 10%): the same bytes, state and activations, at tp 1. It
// once priced the first stage with L / pp blocks and pp micro-batches, no experts' activations
// (pp 4 x 2 in fp32: 1.60 MiB of activations and 0.85 MiB of state where the check has 2.23 and
// 1.16 MiB on rank 1).
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "loom/parallel/pipeline/held_activations.hpp"
#include "loom/parallel/pipeline/schedule_builders.hpp"
#include "loom/plan/layout_cost.hpp"
#include "loom/plan/pipeline_ranks.hpp"
#include "loom/train/memory_budget.hpp"
#include "serial_layout.hpp"

namespace loom::plan {
namespace {

TEST(PlanPipelineMemory, EqualsTheMemoryCheckOfTheRankNeedingTheMost) {
  const int64_t B = 2, M = 8;
  for (const int64_t pp : {2, 4})
    for (const int64_t chunks : {1, 2})
      for (const bool bf16 : {false, true}) {
        train::TrainConfig c;
        c.model = nn::GPTConfig{.vocab_size = 65, .block_size = 32, .n_layer = 8, .n_head = 2, .n_embd = 32};
        c.model.padded_vocab_size = 128;
        c.model.moe.experts = 4;
        c.model.moe.top_k = 2;
        c.model.moe.every = 2;  // blocks 1, 3, 5, 7
        c.batch_size = B;
        c.micro_batches = M;
        c.pp = pp;
        c.chunks = chunks;
        c.schedule = chunks > 1 ? "interleaved" : "1f1b";
        c.precision = bf16 ? "bf16" : "fp32";
        ModelSpec m{"m", 8, 32, 2, 32, 128};
        m.moe = {4, 2, 2};
        Layout l = testing::serial_layout(B);
        l.pp = pp;
        l.chunks = chunks;
        l.zero = 0;
        ClusterSpec cluster = cluster_preset("local-default");
        cluster.precision = bf16 ? Precision::Bf16 : Precision::Fp32;
        const LayoutCost cost = predict(m, cluster, l, B * M);
        ASSERT_TRUE(cost.valid) << cost.why_not;
        const train::MemoryNeed need = train::training_memory(c);
        const std::string what = "pp " + std::to_string(pp) + " x " + std::to_string(chunks) + (bf16 ? ", bf16" : ", fp32") +
                                 ", the check's pp rank " + std::to_string(need.pp_rank);
        EXPECT_EQ(static_cast<double>(cost.state_bytes), need.state) << what;
        EXPECT_EQ(static_cast<double>(cost.activation_bytes), need.activations) << what;
      }
}

// The planner builds its schedule for at most pp (1F1B) or 3 pp (interleaved) micro-batches:
// every rank's peak of held bytes is the full schedule's, whatever its chunks weigh.
TEST(PlanPipelineMemory, TheBoundedScheduleReachesEveryPeakOfTheFullOne) {
  namespace pl = parallel::pipeline;
  for (const int64_t pp : {2, 3, 4})
    for (const int64_t chunks : {1, 2, 3})
      for (int64_t m = pp; m <= 8 * pp; m += pp) {
        Layout l;
        l.pp = pp;
        l.chunks = chunks;
        const pl::Schedule full = pl::build_schedule(chunks > 1 ? pl::ScheduleKind::Interleaved : pl::ScheduleKind::OneFOneB,
                                                     static_cast<int>(pp), static_cast<int>(m), static_cast<int>(chunks));
        const std::optional<pl::Schedule> bounded = planned_schedule(l, m);
        ASSERT_TRUE(bounded.has_value());
        for (const std::vector<int64_t>& bytes : {std::vector<int64_t>{5, 1, 3}, std::vector<int64_t>{1, 7, 2}})
          for (int64_t r = 0; r < pp; ++r) {
            const std::vector<int64_t> chunk_bytes(bytes.begin(), bytes.begin() + chunks);
            EXPECT_EQ(pl::peak_held_bytes(bounded->ranks[static_cast<size_t>(r)], chunk_bytes),
                      pl::peak_held_bytes(full.ranks[static_cast<size_t>(r)], chunk_bytes))
                << "pp " << pp << " x " << chunks << ", " << m << " micro-batches, rank " << r;
          }
      }
}

}  // namespace
}  // namespace loom::plan
