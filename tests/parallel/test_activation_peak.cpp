// The memory check's activations of a tensor- or context-parallel rank
// (train::rank_training_memory, what --dry-run prints; plan::loom_rank_activation_bytes, which the
// planner calls too) against the tracker's activation peak over a step after a warm one, exactly,
// on every rank: tp 2 and 4 with and without sequence parallelism, cp 2, and cp 2 x tp 2 with and
// without it, each in fp32 and bf16, with and without recompute, at widths 16 and 48 (4 heads),
// with one micro-batch and with two (gradient accumulation holds one micro-batch at a time).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/mpi_test_env.hpp"
#include "loom/train/memory_budget.hpp"
#include "parallel/equivalence.hpp"
#include "step_activation_peak.hpp"

namespace loom::parallel {
namespace {

using loom::testing::world;

struct ModelParallel {
  int64_t tp, cp;
  bool sequence_parallel;
};

std::string describe(const ModelParallel& l) {
  return "tp " + std::to_string(l.tp) + (l.sequence_parallel ? " (sp)" : "") + " x cp " + std::to_string(l.cp);
}

// The layouts of this many ranks: all of them model-parallel (no data parallelism).
std::vector<ModelParallel> layouts(int64_t p) {
  std::vector<ModelParallel> out;
  for (const ModelParallel l : {ModelParallel{2, 1, false}, ModelParallel{2, 1, true}, ModelParallel{1, 2, false},
                                ModelParallel{4, 1, false}, ModelParallel{4, 1, true}, ModelParallel{2, 2, false},
                                ModelParallel{2, 2, true}})
    if (l.tp * l.cp == p) out.push_back(l);
  return out;
}

// Summing every block's activations with the first backward's scratch counted these ranks up to
// 20% high (tp 2 (sp) bf16 at width 48: 102144 B for 87936), and ring attention's scratch in bf16
// up to 32% low (cp 2 bf16 at width 48: 71808 B for 105600).
TEST(ActivationPeak, ModelParallelRanksPeakAsTheMemoryCheckCounts) {
  const std::vector<ModelParallel> cases = layouts(world().size());
  if (cases.empty()) GTEST_SKIP() << "tp and cp layouts of 2 and 4 ranks";
  for (const ModelParallel& l : cases)
    for (const int64_t width : {16, 48})
      for (const int64_t micro_batches : {1, 2})
        for (const std::string precision : {"fp32", "bf16"})
          for (const bool recompute : {false, true}) {
            if (micro_batches == 2 && width == 48) continue;  // one micro-batch at a time: once is enough
            train::TrainConfig c = loom::testing::equivalence::tiny(1, 2, micro_batches);
            c.model.n_head = 4;
            c.model.n_embd = width;
            c.model.padded_vocab_size = 64 * l.tp * ((65 + 64 * l.tp - 1) / (64 * l.tp));
            c.tp = l.tp;
            c.cp = l.cp;
            c.sequence_parallel = l.sequence_parallel;
            c.precision = precision;
            c.model.recompute = recompute;
            train::Trainer t(c, true, &world());
            const int64_t measured = loom::testing::step_activation_peak(t);
            EXPECT_EQ(static_cast<int64_t>(train::rank_training_memory(t.config(), 0).activations), measured)
                << describe(l) << ", width " << width << ", " << micro_batches << " micro-batch(es), " << precision
                << (recompute ? ", recompute" : "") << ", rank " << world().rank();
          }
}


// A pipeline rank under tp or cp is still counted as the sum of its terms (the moment count
// covers whole models only): pp 2 x tp 2 and pp 2 x cp 2 on 4 ranks, fp32 and bf16, with and
// without recompute, each pipeline rank within 20% of its tracker's peak (measured 0.83-1.19 of
// it). The ring term once held only the scores of all heads: pp 2 x cp 2 in bf16 was counted
// at 0.51-0.73 of the measured peak (41472 B for 81536 on pp rank 0 under recompute), so the
// memory check could pass a run that does not fit.
TEST(ActivationPeak, PipelineRanksUnderTpOrCpNearTheMemoryCheck) {
  if (world().size() != 4) GTEST_SKIP() << "pp 2 x tp 2 and pp 2 x cp 2 on 4 ranks";
  for (const int64_t cp : {1, 2})
    for (const std::string precision : {"fp32", "bf16"})
      for (const bool recompute : {false, true}) {
        train::TrainConfig c = loom::testing::equivalence::tiny(1, 2, 4);
        c.model.n_head = 4;
        c.model.n_embd = 48;
        c.model.n_layer = 4;
        c.model.padded_vocab_size = 128;
        c.pp = 2;
        c.cp = cp;
        c.tp = 4 / (2 * cp);
        c.precision = precision;
        c.model.recompute = recompute;
        train::Trainer t(c, true, &world());
        const double measured = static_cast<double>(loom::testing::step_activation_peak(t));
        const int64_t r = t.parallelized().group("pp").rank();
        EXPECT_NEAR(train::rank_training_memory(t.config(), r).activations, measured, 0.20 * measured)
            << "pp 2 x " << (cp > 1 ? "cp 2" : "tp 2") << ", " << precision << (recompute ? ", recompute" : "")
            << ", pp rank " << r;
      }
}

}  // namespace
}  // namespace loom::parallel
