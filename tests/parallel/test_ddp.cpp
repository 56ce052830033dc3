// DDP against the serial run: the same seed and global batch on 1..8 ranks, with every
// all-reduce algorithm and with gradient accumulation, must give the serial run's losses
// (relative 1e-5) and final parameters (relative 1e-4). The serial reference is computed
// on every rank locally (no communication), so each rank checks itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "comm/mpi_test_env.hpp"
#include "loom/error.hpp"
#include "loom/plan/memory_model.hpp"
#include "loom/train/trainer.hpp"
#include "parallel/equivalence.hpp"
#include "test_util.hpp"

namespace loom::parallel {
namespace {

using loom::testing::all_close;
using loom::testing::world;
using namespace loom::testing::equivalence;

class DdpEquivalence : public ::testing::TestWithParam<std::string> {};

TEST_P(DdpEquivalence, SameLossesAndParametersAsSerial) {
  const int p = world().size();
  const TrainingRun& want = serial_run(tiny(1, 2 * p, 1));
  train::TrainConfig c = tiny(p, 2, 1);
  c.allreduce = GetParam();
  train::Trainer ddp(c, true, &world());
  expect_equivalent(run(ddp), want, c, "dp=" + std::to_string(p) + " " + GetParam());
}

INSTANTIATE_TEST_SUITE_P(Algorithms, DdpEquivalence,
                         ::testing::Values("mpi", "ring", "tree", "rhd", "param-server"),
                         [](const auto& info) {
                           std::string n = info.param;
                           n.erase(std::remove(n.begin(), n.end(), '-'), n.end());
                           return n;
                         });

TEST(Ddp, GradientAccumulationMatchesSerial) {
  const int p = world().size();
  train::Trainer serial(tiny(1, 2 * p, 3), true);
  const TrainingRun want = run(serial);
  const train::TrainConfig c = tiny(p, 2, 3);
  train::Trainer ddp(c, true, &world());
  expect_equivalent(run(ddp), want, c, "dp=" + std::to_string(p) + " with 3 micro-batches");
}

TEST(Ddp, BucketsLaunchDuringBackwardInReadinessOrder) {
  const int p = world().size();
  if (p < 2) GTEST_SKIP() << "no DDP on one rank";
  train::Trainer t(tiny(p, 2, 1), true, &world());
  DistributedDataParallel* ddp = t.ddp();
  ASSERT_NE(ddp, nullptr);
  EXPECT_GT(ddp->bucket_count(), 2);
  // Record when each parameter's gradient becomes ready (these hooks run after DDP's).
  std::map<const nn::Parameter*, int> ready_at;
  for (nn::Parameter* q : t.model().parameters())
    q->add_grad_ready_hook([&ready_at](nn::Parameter& r) { ready_at.emplace(&r, static_cast<int>(ready_at.size())); });
  t.train_step();
  // A bucket is ready with its last parameter; launches must follow that order exactly.
  std::vector<std::pair<int, int>> ready;  // (when, bucket)
  for (int b = 0; b < ddp->bucket_count(); ++b) {
    int last = -1;
    for (const nn::Parameter* q : ddp->bucket_params(b)) last = std::max(last, ready_at.at(q));
    ready.emplace_back(last, b);
  }
  std::sort(ready.begin(), ready.end());
  std::vector<int> expected;
  for (auto& [when, b] : ready) expected.push_back(b);
  EXPECT_EQ(ddp->launch_order(), expected);
  // Every bucket's all-reduce was started by a grad-ready hook inside backward.
  EXPECT_EQ(ddp->launched_during_backward(), ddp->bucket_count());
  RecordProperty("finished_during_backward", std::to_string(ddp->finished_during_backward()));
  EXPECT_GT(ddp->comm_seconds(), 0.0);
  EXPECT_GE(ddp->exposed_comm_seconds(), 0.0);
}

TEST(Ddp, ModelStateMemoryMatchesTheFormula) {
  // Buckets replace the per-parameter gradients, so DDP's state is the formula's 16P.
  MemoryTracker& m = MemoryTracker::instance();
  const int64_t before = m.current(MemoryCategory::Parameters) + m.current(MemoryCategory::Gradients) +
                         m.current(MemoryCategory::OptimizerState);
  train::Trainer t(tiny(world().size(), 2, 1), true, &world());
  t.train_step();
  const int64_t state = m.current(MemoryCategory::Parameters) + m.current(MemoryCategory::Gradients) +
                        m.current(MemoryCategory::OptimizerState) - before;
  const int64_t want = plan::model_state_bytes(t.model().num_parameters(), world().size(), 0, 8).total();
  EXPECT_NEAR(static_cast<double>(state), static_cast<double>(want), 0.05 * static_cast<double>(want));
}

// grad_reduce_dtype: the buckets' all-reduces move Psi elements of 4 (fp32) or 2 (bf16) bytes a
// step, whatever the compute precision (the counters count whole tensors: a ring sends
// 2 Psi (N - 1) / N of them per rank), and the step's mean loss one fp32 float on the same group.
TEST(Ddp, Bf16GradientReduceHalvesTheBytes) {
  const int p = world().size();
  if (p < 2) GTEST_SKIP() << "no DDP on one rank";
  for (const std::string reduce : {"fp32", "bf16"}) {
    train::TrainConfig c = tiny(p, 2, 1);
    c.precision = "bf16";
    c.grad_reduce_dtype = reduce;
    train::Trainer t(c, true, &world());
    t.train_step();
    t.ddp()->group().reset_stats();
    t.train_step();
    const int64_t psi = t.model().num_parameters();
    EXPECT_EQ(t.ddp()->group().stats().bytes, (reduce == "bf16" ? 2 : 4) * psi + 4) << "reduce " << reduce;
  }
}

TEST(Ddp, ANonFiniteLossOnOneRankStopsOrSkipsOnEveryRank) {
  const int p = world().size();
  if (p < 2) GTEST_SKIP() << "needs a second rank to go wrong";
  // Rank 1 alone computes a NaN loss (a poisoned LayerNorm gain, restored afterwards).
  auto poisoned_step = [&](train::Trainer& t) {
    float& gain = t.model().ln_f().weight().value().f32()[0];
    const float saved = gain;
    if (world().rank() == 1) gain = NAN;
    try {
      const train::StepResult r = t.train_step();
      gain = saved;
      return r;
    } catch (...) {
      gain = saved;
      throw;
    }
  };
  train::Trainer stopper(tiny(p, 2, 1), true, &world());
  try {
    poisoned_step(stopper);
    FAIL() << "expected every rank to stop";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("non-finite loss at step 1"), std::string::npos) << e.what();
  }
  train::TrainConfig c = tiny(p, 2, 1);
  c.on_nan = "skip";
  train::Trainer skipper(c, true, &world());
  const std::vector<float> before(skipper.model().blocks()[0]->mlp().fc().weight().value().f32(),
                                  skipper.model().blocks()[0]->mlp().fc().weight().value().f32() + 8);
  EXPECT_TRUE(poisoned_step(skipper).skipped);  // on every rank, so replicas stay equal
  EXPECT_TRUE(all_close(skipper.model().blocks()[0]->mlp().fc().weight().value().f32(), before.data(), 8, 0, 0,
                        "parameters after a skipped step"));
  EXPECT_FALSE(skipper.train_step().skipped);  // the next, healthy step trains normally
}

TEST(Ddp, LayoutMustMatchTheWorld) {
  train::TrainConfig c = tiny(world().size() + 1, 2, 1);
  try {
    train::Trainer t(c, true, &world());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("!= world size " + std::to_string(world().size())), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace loom::parallel
