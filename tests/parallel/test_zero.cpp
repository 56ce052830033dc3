// Sharded data parallelism against the serial run: ZeRO stages 1-3 and hybrid sharding on
// 1..8 ranks, with and without gradient accumulation, must give the serial run's losses
// (relative 1e-5) and final parameters (relative 1e-4); each rank's model-state memory must
// match the ZeRO formula within 5% plus the declared unit buffers.
#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "comm/mpi_test_env.hpp"
#include "loom/plan/memory_model.hpp"
#include "loom/train/trainer.hpp"
#include "parallel/equivalence.hpp"
#include "test_util.hpp"

namespace loom::parallel {
namespace {

using loom::testing::world;
using namespace loom::testing::equivalence;

struct ZeroCase {
  int stage;
  std::string algorithm;
  int64_t micro_batches;
};

void PrintTo(const ZeroCase& z, std::ostream* os) {
  *os << "zero " << z.stage << " (" << z.algorithm << ", " << z.micro_batches << " micro-batches)";
}

class ZeroEquivalence : public ::testing::TestWithParam<ZeroCase> {};

TEST_P(ZeroEquivalence, SameLossesAndParametersAsSerial) {
  const ZeroCase z = GetParam();
  const int p = world().size();
  train::Trainer serial(tiny(1, 2 * p, z.micro_batches), /*quiet=*/true);
  const TrainingRun want = run(serial);
  train::TrainConfig c = tiny(p, 2, z.micro_batches);
  c.zero = z.stage;
  c.allreduce = z.algorithm;
  train::Trainer sharded(c, true, &world());
  ASSERT_NE(sharded.sharded(), nullptr);
  EXPECT_EQ(sharded.sharded()->unit_count(), c.model.n_layer + 1);  // one per block + the root
  expect_equivalent(run(sharded), want, c,
                    "zero " + std::to_string(z.stage) + " on " + std::to_string(p) + " ranks (" + z.algorithm + ", " +
                        std::to_string(z.micro_batches) + " micro-batches)");
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroEquivalence,
                         ::testing::Values(ZeroCase{1, "mpi", 1}, ZeroCase{2, "mpi", 1}, ZeroCase{3, "mpi", 1},
                                           ZeroCase{1, "ring", 1}, ZeroCase{2, "ring", 1}, ZeroCase{3, "ring", 1},
                                           ZeroCase{1, "mpi", 3}, ZeroCase{2, "mpi", 3}, ZeroCase{3, "mpi", 3}),
                         [](const auto& info) {
                           return "zero" + std::to_string(info.param.stage) + "_" + info.param.algorithm + "_mb" +
                                  std::to_string(info.param.micro_batches);
                         });

class HsdpEquivalence : public ::testing::TestWithParam<int> {};

TEST_P(HsdpEquivalence, ShardInPairsReplicateAcrossPairs) {
  const int p = world().size();
  if (p < 4 || p % 2 != 0) GTEST_SKIP() << "HSDP needs at least two groups of 2 ranks";
  train::Trainer serial(tiny(1, 2 * p, 2), true);
  const TrainingRun want = run(serial);
  train::TrainConfig c = tiny(p, 2, 2);
  c.zero = GetParam();
  c.hsdp_shard = 2;
  train::Trainer hsdp(c, true, &world());
  expect_equivalent(run(hsdp), want, c, "HSDP 2 x " + std::to_string(p / 2) + " zero " + std::to_string(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Stages, HsdpEquivalence, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return "zero" + std::to_string(info.param); });

class ZeroMemory : public ::testing::TestWithParam<int> {};

TEST_P(ZeroMemory, ModelStateMatchesTheFormulaPlusDeclaredBuffers) {
  const int stage = GetParam();
  const int p = world().size();
  MemoryTracker& m = MemoryTracker::instance();
  auto state = [&](MemoryCategory c) { return m.current(c); };
  const int64_t params0 = state(MemoryCategory::Parameters), grads0 = state(MemoryCategory::Gradients),
                opt0 = state(MemoryCategory::OptimizerState);
  train::TrainConfig c = tiny(p, 2, 1);
  c.model.n_layer = 4;
  c.model.n_embd = 32;
  c.zero = stage;
  train::Trainer t(c, true, &world());
  m.reset_peaks();
  const int64_t peak_params0 = m.peak(MemoryCategory::Parameters), peak_grads0 = m.peak(MemoryCategory::Gradients);
  t.train_step();
  t.train_step();
  const plan::StateBytes want = plan::model_state_bytes(t.model().num_parameters(), p, stage, 8);
  const std::string what = "zero " + std::to_string(stage) + " on " + std::to_string(p) + " ranks: ";
  auto expect_near = [&](int64_t got, int64_t formula, const std::string& name) {
    EXPECT_NEAR(static_cast<double>(got), static_cast<double>(formula), 0.05 * static_cast<double>(formula))
        << what << name << " measured " << got << " bytes, formula " << formula;
  };
  // Between steps no unit is gathered and no full gradient is held (stages 2-3).
  expect_near(state(MemoryCategory::Parameters) - params0, want.params, "parameters");
  expect_near(state(MemoryCategory::Gradients) - grads0, want.grads, "gradients");
  expect_near(state(MemoryCategory::OptimizerState) - opt0, want.optimizer, "optimizer state");
  // During a step: the formula plus at most the declared transient buffers.
  const ShardedDataParallel& z = *t.sharded();
  EXPECT_LE(m.peak(MemoryCategory::Parameters) - peak_params0, static_cast<int64_t>(0.05 * want.params) + z.gathered_buffer_bytes())
      << what << "peak parameters beyond the sharded state";
  EXPECT_LE(m.peak(MemoryCategory::Gradients) - peak_grads0, static_cast<int64_t>(0.05 * want.grads) + z.gradient_buffer_bytes())
      << what << "peak gradients beyond the sharded state";
  if (stage == 3) {
    EXPECT_GT(z.gathers(), 0);
    EXPECT_GT(z.prefetched_gathers(), 0) << "the next unit's gather should start before it is needed";
  }
  RecordProperty("memory_report", t.memory_report());
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroMemory, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return "zero" + std::to_string(info.param); });

TEST(ZeroCheckpoint, ResumesUnderAnotherLayoutAndSerially) {
  // ZeRO-3 saves in the serial layout; a ZeRO-1 run and a serial run resumed from that file
  // must continue exactly like the uninterrupted ZeRO-3 run.
  const int p = world().size();
  const std::string dir = fresh_shared_dir("loom_zero_checkpoint", world());
  train::TrainConfig c = tiny(p, 2, 1);
  c.steps = 10;
  c.decay_steps = 10;  // the same schedule for the 5-step first half
  c.zero = 3;
  train::Trainer straight(c, true, &world());
  const TrainingRun want = run(straight);
  const std::vector<float> last_five(want.losses.end() - 5, want.losses.end());

  train_and_checkpoint(c, 5, dir, world());

  train::TrainConfig resumed = c;
  resumed.zero = 1;
  resumed.resume = dir;
  train::Trainer zero1(resumed, true, &world());
  EXPECT_EQ(zero1.step(), 5);
  expect_equivalent({run(zero1).losses, {}, {}}, {last_five, {}, {}}, c, "ZeRO-1 resumed from ZeRO-3");

  train::TrainConfig serial_config = tiny(1, 2 * p, 1);
  serial_config.steps = 10;
  serial_config.decay_steps = 10;
  serial_config.resume = dir;
  train::Trainer serial(serial_config, true);  // every rank on its own, from rank 0's file
  const TrainingRun continued = run(serial);
  expect_equivalent(continued, {last_five, want.names, want.params}, c, "serial resumed from ZeRO-3");
  remove_shared_dir(dir, world());
}

}  // namespace
}  // namespace loom::parallel
