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

// Mixed precision's model state (plan/mixed_precision_cost.hpp) against the memory tracker,
// between steps (no unit gathered, no full gradient held), for DDP and ZeRO 1-3: within 2%
// (the formula counts Psi/N where the shards hold units padded to a multiple of N, and DDP's
// 2 Psi of bf16 copies where only the parameters GEMMs read have one: 1% of this model).
class MixedPrecisionMemory : public ::testing::TestWithParam<int> {};

TEST_P(MixedPrecisionMemory, TrackerMeasuresTheFormula) {
  const int stage = GetParam();
  const int p = world().size();
  if (stage == 0 && p > 1) GTEST_SKIP() << "DDP's row runs on one rank";  // (the same state on any)
  MemoryTracker& m = MemoryTracker::instance();
  const int64_t params0 = m.current(MemoryCategory::Parameters), grads0 = m.current(MemoryCategory::Gradients),
                opt0 = m.current(MemoryCategory::OptimizerState);
  train::TrainConfig c = tiny(p, 2, 1);
  c.model.n_layer = 4;
  c.model.n_embd = 32;
  c.zero = stage;
  c.precision = "bf16";
  train::Trainer t(c, true, &world());
  t.train_step();
  t.train_step();
  const plan::StateBytes want = t.state_formula();
  const std::string what = "bf16, zero " + std::to_string(stage) + " on " + std::to_string(p) + " ranks: ";
  auto expect_near = [&](int64_t got, int64_t formula, const std::string& name) {
    EXPECT_NEAR(static_cast<double>(got), static_cast<double>(formula), 0.02 * static_cast<double>(formula))
        << what << name << " measured " << got << " bytes, formula " << formula;
  };
  expect_near(m.current(MemoryCategory::Parameters) - params0, want.params, "parameters");
  expect_near(m.current(MemoryCategory::Gradients) - grads0, want.grads, "gradients");
  expect_near(m.current(MemoryCategory::OptimizerState) - opt0, want.optimizer, "optimizer state");
}

INSTANTIATE_TEST_SUITE_P(Stages, MixedPrecisionMemory, ::testing::Values(0, 1, 2, 3),
                         [](const auto& info) { return "zero" + std::to_string(info.param); });

TEST(ZeroCheckpoint, Bf16GathersResumeBitExactly) {
  // With bf16 gathers the fp32 master exists only as shards (ZeRO-2 here): the checkpoint holds
  // them, and a resumed run rebuilds the bf16 weights from them exactly as the straight run had.
  const int p = world().size();
  const std::string dir = fresh_shared_dir("loom_zero_bf16_checkpoint", world());
  train::TrainConfig c = tiny(p, 2, 1);
  c.steps = 6;
  c.decay_steps = 6;
  c.zero = 2;
  c.precision = "bf16";
  train::Trainer straight(c, true, &world());
  const TrainingRun want = run(straight);
  train_and_checkpoint(c, 3, dir, world());
  train::TrainConfig resumed = c;
  resumed.resume = dir;
  train::Trainer again(resumed, true, &world());
  ASSERT_EQ(again.step(), 3);
  const std::vector<float> losses = run(again).losses;
  EXPECT_EQ(losses, std::vector<float>(want.losses.end() - 3, want.losses.end()));
  remove_shared_dir(dir, world());
}

// Mixed precision's traffic, as the bytes counters (whole tensors, comm::CommStats) see one
// step: the gradient is reduce-scattered in grad_reduce_dtype (4 or 2 bytes an element) and
// the parameters all-gathered in bf16 (2), over Psi elements padded to a multiple of N. Stages
// 1-2 gather once after the step: (4 + 2) Psi, the 6 Psi (N - 1) / N a ring sends per rank in
// place of fp32's 8 Psi (N - 1) / N; with a bf16 reduce, 4 Psi. Stage 3 gathers each block
// before its forward and again before its backward, the root unit once. The gradient norm
// adds one fp32 all-reduce of 1 float.
struct WireCase {
  int stage;
  std::string reduce;
};

void PrintTo(const WireCase& w, std::ostream* os) { *os << "zero " << w.stage << " reduce " << w.reduce; }

class ZeroWireBytes : public ::testing::TestWithParam<WireCase> {};

TEST_P(ZeroWireBytes, CountersEqualTheMixedPrecisionFormula) {
  const WireCase w = GetParam();
  const int64_t p = world().size();
  train::TrainConfig c = tiny(p, 2, 1);
  c.zero = w.stage;
  c.precision = "bf16";
  c.grad_reduce_dtype = w.reduce;
  train::Trainer t(c, true, &world());
  ShardedDataParallel& z = *t.sharded();
  t.train_step();
  z.reset_comm_stats();
  t.train_step();
  const std::vector<int64_t> units = z.unit_numels();
  int64_t psi = 0, gathered = 0;
  for (size_t i = 0; i < units.size(); ++i) {
    const int64_t padded = (units[i] + p - 1) / p * p;
    psi += padded;
    gathered += (w.stage == 3 && i + 1 < units.size() ? 2 : 1) * padded;  // the root unit is last
  }
  const int64_t reduce_bytes = w.reduce == "bf16" ? 2 : 4;
  const int64_t want = reduce_bytes * psi + 2 * gathered + 4;
  EXPECT_EQ(z.comm_stats().bytes, want) << "zero " << w.stage << ", reduce " << w.reduce << " on " << p
                                        << " ranks: Psi (padded) " << psi;
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroWireBytes,
                         ::testing::Values(WireCase{1, "fp32"}, WireCase{1, "bf16"}, WireCase{2, "fp32"},
                                           WireCase{3, "fp32"}, WireCase{3, "bf16"}),
                         [](const auto& info) {
                           return "zero" + std::to_string(info.param.stage) + "_reduce_" + info.param.reduce;
                         });

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
