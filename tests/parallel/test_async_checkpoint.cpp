// Checkpoints written behind training (--checkpoint-async) against the same run's foreground
// saves: the same tensors, bit for bit, in both formats and several layouts (odd dp, ZeRO-3,
// tp, a pipeline in bf16), while training steps on (so the bytes are copied at the step, not
// read later); a write that fails on one rank is raised on every rank at the same point, the
// previous checkpoint staying `latest`; the copied file is held and counted as predicted, and a
// foreground save copies nothing.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/mpi_test_env.hpp"
#include "loom/tensor/memory_tracker.hpp"
#include "loom/train/checkpoint.hpp"
#include "loom/train/memory_budget.hpp"
#include "loom/train/sharded_checkpoint.hpp"
#include "loom/train/trainer.hpp"
#include "parallel/equivalence.hpp"
#include "test_util.hpp"

namespace loom::train {
namespace {

namespace fs = std::filesystem;
using loom::testing::world;
using loom::testing::equivalence::fresh_shared_dir;
using loom::testing::equivalence::remove_shared_dir;
using loom::testing::equivalence::tiny;

struct AsyncCase {
  std::string name;
  int64_t ranks;
  std::function<void(TrainConfig&)> layout;
};

std::vector<AsyncCase> cases() {
  return {
      {"serial_single", 1, [](TrainConfig&) {}},
      {"serial_sharded", 1, [](TrainConfig& c) { c.checkpoint_format = "sharded"; }},
      {"dp2_zero3", 2, [](TrainConfig& c) { c.dp = 2, c.zero = 3; }},
      {"tp2_single", 2, [](TrainConfig& c) { c.tp = 2, c.checkpoint_format = "single"; }},
      {"dp3_zero2", 3, [](TrainConfig& c) { c.dp = 3, c.zero = 2; }},
      {"dp2_pp2_zero1_bf16", 4,
       [](TrainConfig& c) {
         c.dp = 2, c.pp = 2, c.zero = 1, c.micro_batches = 2, c.precision = "bf16", c.model.n_layer = 4;
       }},
  };
}

TrainConfig config_of(const AsyncCase& a) {
  TrainConfig c = tiny(1, 2, 1);
  c.steps = 5;
  c.checkpoint_every = 2;
  c.keep_checkpoints = 10;
  c.eval_batches = 1;
  c.log_every = 1;
  a.layout(c);
  return c;
}

// Every tensor of the checkpoint of `step` in run directory dir, whole.
std::map<std::string, std::vector<float>> checkpoint_state(const std::string& dir, int64_t step) {
  fs::path path = fs::path(dir) / checkpoint_dir_name(step);
  if (!fs::exists(path)) path += ".safetensors";
  CheckpointReader reader(path.string());
  std::map<std::string, std::vector<float>> out;
  for (auto& [name, t] : read_full_state(reader)) out[name].assign(t.f32(), t.f32() + t.numel());
  return out;
}

std::vector<double> train_losses(const std::string& dir) {
  std::vector<double> out;
  std::ifstream in(fs::path(dir) / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.value("kind", "") == "train") out.push_back(j.at("loss").get<double>());
  }
  return out;
}

TEST(AsyncCheckpoint, WritesWhatTheForegroundSaveWrites) {
  const int64_t p = world().size();
  int compared = 0;
  for (const AsyncCase& a : cases()) {
    if (a.ranks != p) continue;
    std::map<bool, std::string> dirs;
    for (const bool async : {false, true}) {
      dirs[async] = fresh_shared_dir("loom_async_ckpt_" + a.name + (async ? "_async" : "_sync"), world());
      TrainConfig c = config_of(a);
      c.out_dir = dirs[async];
      c.checkpoint_async = async;
      Trainer t(c, true, &world());
      t.run();
    }
    world().barrier();
    for (const int64_t step : {2, 4, 5})  // 2 and 4 behind training, 5 the run's end
      EXPECT_EQ(checkpoint_state(dirs[true], step), checkpoint_state(dirs[false], step)) << a.name << ", step " << step;
    const std::vector<double> losses = train_losses(dirs[true]);
    EXPECT_EQ(losses.size(), 5u) << a.name;
    EXPECT_EQ(losses, train_losses(dirs[false])) << a.name;
    EXPECT_EQ(fs::path(resolve_checkpoint_path(dirs[true])).filename().string().rfind(checkpoint_dir_name(5), 0), 0u)
        << a.name;
    for (const auto& [async, dir] : dirs) remove_shared_dir(dir, world());
    ++compared;
  }
  if (compared == 0) GTEST_SKIP() << "layouts of 1-4 ranks";
}

// Collective: fn with files limited to `bytes` on rank `rank` only (writing past it: EFBIG).
void with_small_files_on(int rank, rlim_t bytes, const std::function<void()>& fn) {
  rlimit old{};
  ASSERT_EQ(0, getrlimit(RLIMIT_FSIZE, &old));
  const auto previous_handler = std::signal(SIGXFSZ, SIG_IGN);
  if (world().rank() == rank) {
    rlimit small = old;
    small.rlim_cur = bytes;
    ASSERT_EQ(0, setrlimit(RLIMIT_FSIZE, &small));
  }
  fn();
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, previous_handler);
}

TEST(AsyncCheckpoint, AFailedWriteIsRaisedOnEveryRankAndLatestStays) {
  const int p = world().size();
  if (p > 2) GTEST_SKIP() << "1 and 2 ranks";
  const std::string dir = fresh_shared_dir("loom_async_ckpt_failed", world());
  TrainConfig c = tiny(p, 2, 1);
  c.zero = p > 1 ? 3 : 0;
  c.checkpoint_format = "sharded";  // each rank writes a file of its own
  c.out_dir = dir;
  Trainer t(c, true, &world());
  t.train_step();
  t.train_step();
  t.save_checkpoint_async();
  t.train_step();  // steps on while it is written
  ASSERT_TRUE(t.finish_checkpoint_write().has_value());
  t.train_step();
  std::string error;
  with_small_files_on(p - 1, 1000, [&] {
    t.save_checkpoint_async();
    t.train_step();
    error = loom::testing::error_of([&] { t.finish_checkpoint_write(); });
  });
  EXPECT_NE(error.find("the checkpoint of step 4, written in the background, failed: "), std::string::npos) << error;
  EXPECT_NE(error.find("File too large"), std::string::npos) << error;
  if (p > 1) {
    EXPECT_NE(error.find("rank 1: "), std::string::npos) << error;
  }
  world().barrier();
  EXPECT_EQ(fs::path(resolve_checkpoint_path(dir)).filename().string(), checkpoint_dir_name(2));
  EXPECT_FALSE(fs::exists(fs::path(dir) / checkpoint_dir_name(4)));
  EXPECT_FALSE(fs::exists(fs::path(dir) / (checkpoint_dir_name(4) + ".tmp")));
  EXPECT_FALSE(t.finish_checkpoint_write().has_value()) << "the failed write is over";
  remove_shared_dir(dir, world());
}

TEST(AsyncCheckpoint, RunStopsEveryRankAfterTheSameStepWhenAWriteFails) {
  const int p = world().size();
  if (p != 2) GTEST_SKIP() << "2 ranks: the write fails on rank 1, rank 0 writes the run's files";
  const std::string dir = fresh_shared_dir("loom_async_ckpt_run_failed", world());
  TrainConfig c = tiny(2, 2, 1);
  c.zero = 3;  // rank 1 writes a shard (a DDP replica would write nothing)
  c.steps = 30;
  c.checkpoint_every = 1;
  c.checkpoint_async = true;
  c.checkpoint_format = "sharded";
  c.out_dir = dir;
  std::string error;
  int64_t stopped_at = -1;
  {
    Trainer t(c, true, &world());
    with_small_files_on(1, 1000, [&] { error = loom::testing::error_of([&] { t.run(); }); });
    stopped_at = t.step();
  }
  EXPECT_NE(error.find("the checkpoint of step 1, written in the background, failed: rank 1: "), std::string::npos)
      << error;
  EXPECT_LT(stopped_at, c.steps) << "the run went on past the failed write";
  float mine = static_cast<float>(stopped_at), most = mine;
  world().all_reduce(&most, 1, comm::ReduceOp::Max);
  EXPECT_EQ(most, mine) << "the ranks stopped after different steps";
  EXPECT_FALSE(fs::exists(fs::path(dir) / "latest"));
  remove_shared_dir(dir, world());
}

TEST(AsyncCheckpoint, TheFileBeingWrittenIsCountedAndWithinThePrediction) {
  const int64_t p = world().size();
  for (const AsyncCase& a : cases()) {
    if (a.ranks != p) continue;
    const std::string dir = fresh_shared_dir("loom_async_ckpt_memory_" + a.name, world());
    TrainConfig c = config_of(a);
    c.out_dir = dir;
    c.checkpoint_async = true;
    Trainer t(c, true, &world());
    t.train_step();
    const int64_t before = MemoryTracker::instance().current(MemoryCategory::Other);
    t.save_checkpoint_async();
    const int64_t held = MemoryTracker::instance().current(MemoryCategory::Other) - before;
    t.finish_checkpoint_write();
    EXPECT_EQ(MemoryTracker::instance().current(MemoryCategory::Other), before) << a.name << ": not given back";
    // The prediction counts tensors; a file adds its header (names, shapes, the config: ~10 KB,
    // which only a model this small notices).
    const int64_t predicted = checkpoint_staging_bytes(c, t.parallelized().group("pp").rank());
    constexpr int64_t kHeader = 16 << 10;
    EXPECT_LE(held, predicted + kHeader) << a.name;
    // The one writer of a whole model (serial, or rank 0 of a single file) and a ZeRO-3 shard
    // hold what was predicted.
    const bool whole = world().rank() == 0 && (p == 1 || c.checkpoint_format == "single");
    if (whole || c.zero == 3) {
      EXPECT_GE(held, predicted) << a.name;
    }
    // A foreground save writes the state from where it lies: no copy of its file (a single file
    // of several ranks gathers the model to rank 0, its own copy).
    if (c.checkpoint_format != "single" || p == 1) {
      MemoryTracker::instance().reset_peaks();
      const int64_t other = MemoryTracker::instance().current(MemoryCategory::Other);
      t.save_checkpoint_now();
      EXPECT_EQ(MemoryTracker::instance().peak(MemoryCategory::Other), other) << a.name << ": the save copied its file";
    }
    remove_shared_dir(dir, world());
  }
}

}  // namespace
}  // namespace loom::train
