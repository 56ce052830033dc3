// A checkpoint must hold every tensor of the serial model and optimizer state. The tiling
// check sees only the tensors some rank wrote, so a tensor every rank's pieces leave out (as
// bf16 ZeRO-1/2 once left out the experts) is checked against what the ranks' models have:
// saving refuses on every rank, in either format, before anything is published; loading
// refuses a manifest without it even when no destination piece asks for it.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/mpi_test_env.hpp"
#include "loom/train/checkpoint.hpp"
#include "loom/train/checkpoint_manifest.hpp"
#include "loom/train/sharded_checkpoint.hpp"
#include "loom/train/state_coverage.hpp"
#include "loom/train/trainer.hpp"
#include "parallel/equivalence.hpp"

namespace loom::train {
namespace {

namespace fs = std::filesystem;
using loom::testing::error_of;
using loom::testing::world;
using namespace loom::testing::equivalence;

// The tensor the tests take away: one every layout has on some rank.
constexpr const char* kDropped = "model.blocks.0.attn.proj.bias";

// dp over the world (ZeRO-1 beyond one rank: the optimizer state in shards), bf16.
TrainConfig config_for(const std::string& dir, const std::string& format) {
  const int p = world().size();
  TrainConfig c = tiny(p, 2, 1);
  c.zero = p > 1 ? 1 : 0;
  c.precision = "bf16";
  c.steps = 1;
  c.checkpoint_format = format;
  c.out_dir = dir;
  return c;
}

CheckpointInfo info_of(Trainer& t) {
  TrainConfig c = t.config();
  return {t.step(), to_toml(c), t.spec().data_identity(), c.optimizer, t.optimizer().steps_taken()};
}

std::vector<StatePiece> without(std::vector<StatePiece> pieces, const std::string& name) {
  std::erase_if(pieces, [&](const StatePiece& p) { return p.name == name; });
  return pieces;
}

class CheckpointCompleteness : public ::testing::TestWithParam<std::string> {};

// Every rank's pieces leave out one tensor (a bug in a layout's pieces): the save is refused
// on every rank naming it, the step's checkpoint never appears, `latest` and the previous
// checkpoint stay, and a resume still takes the previous one.
TEST_P(CheckpointCompleteness, SavingRefusesATensorNoRankHolds) {
  const std::string format = GetParam();
  const std::string dir = fresh_shared_dir("loom_completeness_save_" + format, world());
  TrainConfig c = config_for(dir, format);
  {
    Trainer t(c, true, &world());
    t.save_checkpoint_now();  // step 0: the previous checkpoint
    run(t);                   // step 1
    const CheckpointInfo info = info_of(t);
    const std::string error = error_of([&] {
      if (format == "sharded") {
        save_sharded_checkpoint(dir, without(t.local_state(), kDropped), t.state_shapes(), info, t.layout(),
                                c.keep_checkpoints, world());
      } else {
        std::map<std::string, Tensor> tensors = t.state_dict();
        tensors.erase(kDropped);
        save_single_checkpoint(dir, tensors, t.state_shapes(), info, c.keep_checkpoints, world());
      }
    });
    EXPECT_NE(error.find("the checkpoint being written for step 1 has no tensor 'model.blocks.0.attn.proj.bias' (16)"),
              std::string::npos)
        << error;
    EXPECT_NE(error.find("nothing was saved and the previous checkpoint of '" + dir + "' stays latest"),
              std::string::npos)
        << error;
  }
  world().barrier();
  const std::string previous = checkpoint_dir_name(0) + (format == "sharded" ? "" : ".safetensors");
  EXPECT_EQ(fs::read_symlink(fs::path(dir) / "latest").string(), previous);
  EXPECT_FALSE(fs::exists(fs::path(dir) / checkpoint_dir_name(1)));
  EXPECT_FALSE(fs::exists(fs::path(dir) / (checkpoint_dir_name(1) + ".safetensors")));
  EXPECT_FALSE(fs::exists(fs::path(dir) / (checkpoint_dir_name(1) + ".tmp")));  // the rank files written are removed
  c.resume = dir;
  Trainer resumed(c, true, &world());
  EXPECT_EQ(resumed.step(), 0);
  remove_shared_dir(dir, world());
}

INSTANTIATE_TEST_SUITE_P(Formats, CheckpointCompleteness, ::testing::Values("sharded", "single"),
                         [](const auto& info) { return std::string(info.param); });

// A manifest edited to lack a tensor: refused by name whether or not this rank's pieces ask
// for it (here they do not, as pieces that left a tensor out would not), and by a resume.
TEST(CheckpointManifestCompleteness, LoadingRefusesAManifestWithoutATensorTheModelHas) {
  const std::string dir = fresh_shared_dir("loom_completeness_load", world());
  TrainConfig c = config_for(dir, "sharded");
  {
    Trainer t(c, true, &world());
    const std::string path = t.save_checkpoint_now();
    world().barrier();
    if (world().rank() == 0) {
      const fs::path manifest = fs::path(path) / kManifestName;
      nlohmann::json m = nlohmann::json::parse(std::ifstream(manifest));
      EXPECT_EQ(m["tensors"].erase(kDropped), 1u);
      std::ofstream(manifest) << m.dump(1);
    }
    world().barrier();
    const std::string error = error_of(
        [&] { load_state(path, without(t.local_state(), kDropped), c.optimizer, t.state_shapes()); });
    EXPECT_NE(error.find("checkpoint '" + path + "' has no tensor 'model.blocks.0.attn.proj.bias' (16)"),
              std::string::npos)
        << error;
  }
  c.resume = dir;
  const std::string resume_error = error_of([&] { Trainer resumed(c, true, &world()); });
  EXPECT_NE(resume_error.find("has no tensor 'model.blocks.0.attn.proj.bias'"), std::string::npos) << resume_error;
  remove_shared_dir(dir, world());
}

// A resume checks the pieces it is about to load, before loading: a tensor that no rank's
// pieces ask for (a layout bug on the loading side, which the checkpoint cannot show) would
// keep its initial values; so would the elements of a shard that no owner loads.
TEST(ResumeCoverage, RefusesPiecesThatLeaveATensorOut) {
  const std::string dir = fresh_shared_dir("loom_coverage_whole", world());
  Trainer t(config_for(dir, "sharded"), true, &world());
  check_owners_tile_state(t.local_state(), t.state_shapes(), "resuming", world());  // the real pieces pass
  const std::string error = error_of(
      [&] { check_owners_tile_state(without(t.local_state(), kDropped), t.state_shapes(), "resuming", world()); });
  EXPECT_NE(error.find("resuming has no tensor 'model.blocks.0.attn.proj.bias' (16)"), std::string::npos) << error;
  EXPECT_NE(error.find("no rank's pieces load it"), std::string::npos) << error;
  remove_shared_dir(dir, world());
}

TEST(ResumeCoverage, RefusesPiecesThatLeaveAShardOut) {
  if (world().size() == 1) GTEST_SKIP() << "one rank's pieces are whole tensors: no shard to leave out";
  const std::string dir = fresh_shared_dir("loom_coverage_shard", world());
  Trainer t(config_for(dir, "sharded"), true, &world());  // ZeRO-1: the optimizer state in shards
  std::vector<StatePiece> pieces = t.local_state();
  std::string dropped;  // the last rank leaves out its shard of the first optimizer tensor
  for (const StatePiece& p : pieces)
    if (p.owner && p.name.starts_with("optim.") && p.layout.numel() > 0) {
      dropped = p.name;
      break;
    }
  if (world().rank() == world().size() - 1) {
    ASSERT_FALSE(dropped.empty());
    pieces = without(pieces, dropped);
  }
  const std::string error = error_of([&] { check_owners_tile_state(pieces, t.state_shapes(), "resuming", world()); });
  EXPECT_NE(error.find("resuming: the pieces this layout loads do not cover tensor 'optim."), std::string::npos)
      << error;
  EXPECT_NE(error.find(") are in no piece"), std::string::npos) << error;
  remove_shared_dir(dir, world());
}

}  // namespace
}  // namespace loom::train
