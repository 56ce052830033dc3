// What ZeRO-2/3 hold whole at once in a step beyond their shards, as the tracker measures it
// (MemoryCategory::Gathered: stage 3's gathered units, the units' full gradients until their
// reduce-scatter ends) over a warm step, against the count the memory check, `loom train
// --dry-run` and the planner share (plan/zero_gathered.hpp): exact, in fp32 and bf16 (bf16
// gathers: a unit's bf16 buffer and its fp32 widening, a router's weight in an fp32 unit of its
// own), two micro-batches (the second starts with the first's last reductions in flight; one
// for plain ZeRO-3), under tp 2, HSDP (4 ranks) and with a mixture of experts with and without ep. The check before a
// run once left these out entirely; the planner counted a layer and the next, weights and
// gradients, without padding, the prefetch's bf16-only buffer or the root's gradient, and
// split the LayerNorms over tp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/mpi_test_env.hpp"
#include "loom/parallel/zero.hpp"
#include "loom/tensor/memory_tracker.hpp"
#include "loom/train/memory_budget.hpp"
#include "loom/train/trainer.hpp"
#include "parallel/equivalence.hpp"
#include "step_activation_peak.hpp"

namespace loom::parallel {
namespace {

using loom::testing::world;
using loom::testing::equivalence::tiny;

struct GatheredCase {
  std::string name;
  int zero = 3;
  int64_t tp = 1, ep = 1, experts = 0;
  int64_t hsdp_shard = 0;  // HSDP: units padded to the shard group, not dp
  int64_t pp = 1;
  std::string schedule = "1f1b";
  int64_t chunks = 1;
  std::string zero3_reshard = "micro-batch";
};

TEST(ZeroGathered, TrackersPeakIsTheMemoryChecksCount) {
  const int64_t p = world().size();
  if (p != 2 && p != 4) GTEST_SKIP() << "measured on 2 and 4 ranks";
  const std::vector<GatheredCase> cases = {
      {.name = "zero3"},
      {.name = "zero2", .zero = 2},
      {.name = "zero3_tp2", .tp = 2},
      {.name = "zero3_moe", .experts = 4},
      {.name = "zero3_moe_ep2", .ep = 2, .experts = 4},
      {.name = "zero2_moe", .zero = 2, .experts = 4},
      {.name = "zero3_hsdp2", .hsdp_shard = 2},
      // Pipelines (4 ranks): each chunk's own root unit, the tied table in a unit of its own on
      // both end stages, the units walked through this rank's part of the schedule.
      {.name = "zero3_pp2_1f1b", .pp = 2},
      {.name = "zero2_pp2_gpipe", .zero = 2, .pp = 2, .schedule = "gpipe"},
      {.name = "zero3_pp2_interleaved", .pp = 2, .schedule = "interleaved", .chunks = 2},
      {.name = "zero3_moe_pp2_gpipe", .experts = 4, .pp = 2, .schedule = "gpipe"},
      // ZeRO-3 keeping each unit from its first forward to its last backward of the step.
      {.name = "zero3_reshard_step", .zero3_reshard = "step"},
      {.name = "zero3_reshard_step_pp2_1f1b", .pp = 2, .zero3_reshard = "step"},
      {.name = "zero3_reshard_step_pp2_interleaved", .pp = 2, .schedule = "interleaved", .chunks = 2,
       .zero3_reshard = "step"},
  };
  for (const GatheredCase& g : cases)
    for (const std::string precision : {"fp32", "bf16"})
      for (const int64_t micro_batches : {1, 2}) {
        // The second micro-batch holds the most (kept units: the first's backward keeps them all).
        if (micro_batches == 1 && g.name != "zero3" && g.name != "zero3_reshard_step") continue;
        if ((g.hsdp_shard > 0 || g.pp > 1) && p < 4) continue;  // two shard groups of two
        // A pipeline over 4 micro-batches: 1F1B's warm-up and steady state, both chunks' rounds.
        train::TrainConfig c = tiny(p / (g.tp * g.pp), 2, g.pp > 1 ? 4 : micro_batches);
        c.batch_size = g.pp > 1 ? 4 : 2;
        c.pp = g.pp;
        c.schedule = g.schedule;
        c.chunks = g.chunks;
        c.zero3_reshard = g.zero3_reshard;
        c.hsdp_shard = g.hsdp_shard;
        c.model.n_layer = 4;  // blocks 1 and 3 mixtures of experts
        c.model.n_embd = 18;  // a block of 4122 elements: padded on 4 ranks
        c.zero = g.zero;
        c.tp = g.tp;
        c.ep = g.ep;
        if (g.experts > 0) {
          c.model.moe.experts = g.experts;
          c.model.moe.top_k = 2;
          c.model.moe.every = 2;
        }
        c.precision = precision;
        train::Trainer t(c, true, &world());
        // Between steps every unit is released and every reduction completed: nothing held before.
        const int64_t measured = loom::testing::step_peak(t, MemoryCategory::Gathered);
        EXPECT_EQ(MemoryTracker::instance().current(MemoryCategory::Gathered), 0) << "a unit still held after the step";
        // An evaluation's forwards have no backward to release the root units (nor, kept for
        // the step, any unit): it frees them itself.
        t.evaluate();
        EXPECT_EQ(MemoryTracker::instance().current(MemoryCategory::Gathered), 0)
            << "a unit still held after an evaluation";
        // This rank's count (a pipeline's stages hold different units).
        const double predicted = train::rank_training_memory(t.config(), t.parallelized().group("pp").rank()).gathered;
        const std::string what = g.name + ", " + precision + ", " + std::to_string(c.micro_batches) + " micro-batches on " +
                                 std::to_string(p) + " ranks";
        EXPECT_GT(measured, 0) << what;
        EXPECT_EQ(predicted, static_cast<double>(measured)) << what;
      }
}

}  // namespace
}  // namespace loom::parallel
