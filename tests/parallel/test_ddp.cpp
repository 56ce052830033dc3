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
#include "test_util.hpp"

namespace loom::parallel {
namespace {

using loom::testing::all_close;
using loom::testing::world;

train::TrainConfig tiny(int64_t dp, int64_t batch_per_rank, int64_t micro_batches) {
  train::TrainConfig c;
  c.data = LOOM_SOURCE_DIR "/data/tinyshakespeare.txt";
  c.model.n_layer = 2;
  c.model.n_head = 2;
  c.model.n_embd = 16;
  c.model.block_size = 16;
  c.batch_size = batch_per_rank;
  c.micro_batches = micro_batches;
  c.dp = dp;
  c.steps = 20;
  c.warmup_steps = 3;
  c.lr = 1e-3;  // AdamW turns reduction-order noise into steps of up to lr where a gradient is ~0
  c.threads = 1;
  c.out_dir = "";  // no files: each test compares in memory
  c.bucket_mb = 0.01;  // ~10 KiB: several buckets even for the tiny model
  return c;
}

struct TrainingRun {
  std::vector<float> losses;
  std::vector<std::string> names;
  std::vector<std::vector<float>> params;
};

TrainingRun run(train::Trainer& t) {
  TrainingRun r;
  while (t.step() < t.config().steps) r.losses.push_back(t.train_step().loss);
  for (nn::Parameter* p : t.model().parameters()) {
    r.names.push_back(p->name());
    r.params.emplace_back(p->value().f32(), p->value().f32() + p->numel());
  }
  return r;
}

// Losses: relative 1e-5 each. Parameters: relative 1e-4 of each tensor's largest magnitude,
// except the key third of each attention QKV bias: its true gradient is exactly zero (a
// constant added to every key of a query leaves the softmax unchanged), so AdamW steps it
// by rounding noise, which differs with the reduction order; it is held to the drift bound
// 2 * steps * lr instead.
void expect_equivalent(const TrainingRun& ddp, const TrainingRun& serial, const train::TrainConfig& c,
                       const std::string& what) {
  ASSERT_EQ(ddp.losses.size(), serial.losses.size());
  EXPECT_TRUE(all_close(ddp.losses, serial.losses, 1e-5, 0, what + " losses"));
  const int64_t C = c.model.n_embd;
  for (size_t i = 0; i < serial.params.size(); ++i) {
    const std::vector<float>& got = ddp.params[i];
    const std::vector<float>& want = serial.params[i];
    const bool qkv_bias = serial.names[i].ends_with("attn.qkv.bias");
    float scale = 0.0f;
    for (size_t k = 0; k < want.size(); ++k)
      if (!qkv_bias || k < static_cast<size_t>(C) || k >= static_cast<size_t>(2 * C)) scale = std::max(scale, std::fabs(want[k]));
    const std::string name = what + " " + serial.names[i];
    if (!qkv_bias) {
      EXPECT_TRUE(all_close(got, want, 0, 1e-4 * scale, name));
      continue;
    }
    EXPECT_TRUE(all_close(got.data(), want.data(), C, 0, 1e-4 * scale, name + " (q)"));
    EXPECT_TRUE(all_close(got.data() + C, want.data() + C, C, 0, 2.0 * c.steps * c.lr, name + " (k, zero gradient)"));
    EXPECT_TRUE(all_close(got.data() + 2 * C, want.data() + 2 * C, C, 0, 1e-4 * scale, name + " (v)"));
  }
}

class DdpEquivalence : public ::testing::TestWithParam<std::string> {};

TEST_P(DdpEquivalence, SameLossesAndParametersAsSerial) {
  const int p = world().size();
  train::Trainer serial(tiny(1, 2 * p, 1), /*quiet=*/true);
  const TrainingRun want = run(serial);
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
