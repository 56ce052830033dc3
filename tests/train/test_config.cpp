// Config: TOML and flags from one schema; every documented bad input is a clear error.
#include <gtest/gtest.h>

#include <fstream>

#include "loom/error.hpp"
#include "loom/train/config.hpp"
#include "test_util.hpp"

namespace loom::train {
namespace {

using testing::error_of;

TEST(Config, TomlOverridesDefaults) {
  TrainConfig c;
  apply_toml_string(c, "[model]\nn_layer = 3\nrecompute = true\n[optim]\nlr = 1\n[run]\nout_dir = 'x'\n", "t.toml");
  EXPECT_EQ(c.model.n_layer, 3);
  EXPECT_TRUE(c.model.recompute);
  EXPECT_EQ(c.lr, 1.0);  // an integer is accepted for a number
  EXPECT_EQ(c.out_dir, "x");
  EXPECT_EQ(c.model.n_embd, TrainConfig{}.model.n_embd);
}

TEST(Config, UnknownKeysSuggestTheClosest) {
  TrainConfig c;
  EXPECT_EQ(error_of([&] { apply_toml_string(c, "[model]\nn_layers = 3\n", "t.toml"); }),
            "t.toml: unknown key 'n_layers' in [model] (did you mean 'n_layer'?)");
  EXPECT_EQ(error_of([&] { apply_toml_string(c, "[train]\nlr = 0.1\n", "t.toml"); }),
            "t.toml: unknown key 'lr' in [train] (it belongs in [optim])");
  EXPECT_EQ(error_of([&] { apply_toml_string(c, "[modle]\nn_layer = 3\n", "t.toml"); }),
            "t.toml: unknown section [modle] (did you mean 'model'?)");
}

TEST(Config, WrongTypesAndSyntaxAreErrors) {
  TrainConfig c;
  EXPECT_EQ(error_of([&] { apply_toml_string(c, "[model]\nn_layer = 'four'\n", "t.toml"); }),
            "t.toml: [model] n_layer must be an integer");
  EXPECT_NE(error_of([&] { apply_toml_string(c, "[model\nn_layer = 4\n", "t.toml"); }).find("t.toml:1:"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { apply_toml_file(c, "/nonexistent.toml"); }), "cannot open config file '/nonexistent.toml'");
}

TEST(Config, FlagsParseByType) {
  TrainConfig c;
  auto schema = config_schema(c);
  auto key = [&](const std::string& k) { return *std::find_if(schema.begin(), schema.end(), [&](auto& e) { return e.key == k; }); };
  set_from_string(key("steps"), "42");
  set_from_string(key("lr"), "3e-4");
  set_from_string(key("recompute"), "true");
  EXPECT_EQ(c.steps, 42);
  EXPECT_FLOAT_EQ(static_cast<float>(c.lr), 3e-4f);
  EXPECT_TRUE(c.model.recompute);
  EXPECT_EQ(error_of([&] { set_from_string(key("steps"), "4x"); }), "--steps: expected integer, got '4x'");
  EXPECT_EQ(error_of([&] { set_from_string(key("lr"), "fast"); }), "--lr: expected number, got 'fast'");
  // Found by the fuzzer: such a value printed into a checkpoint's TOML did not read back.
  EXPECT_EQ(error_of([&] { set_from_string(key("out_dir"), "runs/\xf4x"); }),
            "--out-dir: the value is not valid UTF-8 (invalid UTF-8 at byte offset 6)");
}

TEST(Config, ValidationNamesTheValue) {
  TrainConfig c;
  c.batch_size = 0;
  EXPECT_EQ(error_of([&] { c.validate(); }), "batch_size must be >= 1, got 0");
  c = TrainConfig{};
  c.optimizer = "adam";
  EXPECT_EQ(error_of([&] { c.validate(); }), "optimizer must be 'adamw' or 'sgd', got 'adam'");
  c = TrainConfig{};
  c.pin_ranks = "always";
  EXPECT_EQ(error_of([&] { c.validate(); }), "pin_ranks must be 'auto' or 'off', got 'always'");
  c = TrainConfig{};
  c.schedule_file = "mine.txt";
  EXPECT_EQ(error_of([&] { c.validate(); }), "schedule_file (mine.txt) is a pipeline schedule: set pp > 1");
  c.pp = 2;
  c.chunks = 2;  // a custom file brings its own chunks: no schedule = "interleaved" needed
  EXPECT_NO_THROW(c.validate());
}

TEST(Config, Tp3dGridsAreCheckedBeforeAnyRankTalks) {
  TrainConfig c;
  c.tp_3d = "2,2";
  EXPECT_EQ(error_of([&] { c.validate(); }), "tp_3d must be \"R,C,D\": three degrees (row, col, depth), got '2,2'");
  c.tp_3d = "2,x,1";
  EXPECT_EQ(error_of([&] { c.validate(); }), "tp_3d must be \"R,C,D\": three degrees (row, col, depth), got '2,x,1'");
  c.tp_3d = "2,0,1";
  EXPECT_EQ(error_of([&] { c.validate(); }), "tp_3d degrees must be >= 1, got '2,0,1'");
  c.tp_3d = "3,1,1";
  c.model.n_head = 4;
  EXPECT_EQ(error_of([&] { c.validate(); }),
            "n_head (4) must be divisible by the row degree of tp_3d (3,1,1): attention heads are split over row");
  c.tp_3d = "2,2,2";
  c.tp = 2;
  EXPECT_EQ(error_of([&] { c.validate(); }), "tp_3d (2,2,2) and tp (2) are two tensor-parallel layouts: give one");
  c.tp = 1;
  c.pp = 2;  // a pipeline of grids
  EXPECT_NO_THROW(c.validate());
  c.pp = 1;
  c.dp = 2;
  c.zero = 3;  // ZeRO over the grids' replicas: each grid rank's shard sharded again over dp
  EXPECT_NO_THROW(c.validate());
  c.dp = 1;
  c.zero = 0;
  c.tp_overlap = "partly";
  EXPECT_EQ(error_of([&] { c.validate(); }), "tp_overlap must be 'on' or 'off', got 'partly'");
  c.tp_overlap = "off";
  c.tp_3d_overlap = "yes";
  EXPECT_EQ(error_of([&] { c.validate(); }), "tp_3d_overlap must be 'on' or 'off', got 'yes'");
  c.tp_3d_overlap = "off";
  c.resume = "latest";  // a 3D run resumes (checkpoints of any layout, either format)
  c.checkpoint_format = "sharded";  // and writes sharded ones (each grid rank its own pieces)
  c.precision = "bf16";  // bf16 GEMMs, bf16 weight gathers over depth, bf16 activations on the grid's wire
  EXPECT_NO_THROW(c.validate());
  c.precision = "fp32";
  EXPECT_NO_THROW(c.validate());
  c.resume = "";
  c.dp = 2;
  EXPECT_EQ(c.world_ranks(), 16);
  EXPECT_EQ(c.batch_shards(), 4);
  EXPECT_EQ(c.mesh_layout().describe(), "dp(2) x pp(1) x cp(1) x depth(2) x row(2) x col(2) x tp(1)");
}

TEST(Config, CommTimeoutIsAKeyAndAFlag) {
  TrainConfig c;
  EXPECT_EQ(c.comm_timeout, 300.0);
  apply_toml_string(c, "[parallel]\ncomm_timeout = 30\n", "t.toml");
  EXPECT_EQ(c.comm_timeout, 30.0);
  auto schema = config_schema(c);
  const auto key = std::find_if(schema.begin(), schema.end(), [](auto& e) { return e.key == "comm_timeout"; });
  ASSERT_NE(key, schema.end());
  EXPECT_EQ(flag_name(key->key), "comm-timeout");
  set_from_string(*key, "2.5");
  EXPECT_EQ(c.comm_timeout, 2.5);
  c.comm_timeout = -1;
  EXPECT_EQ(error_of([&] { c.validate(); }), "comm_timeout must be seconds >= 0 (0 = off), got -1");
}

TEST(Config, ResolvedTomlRoundTrips) {
  TrainConfig a;
  a.model.n_layer = 5;
  a.lr = 0.25;
  a.data = "some \"quoted\" path";
  // Found by the fuzzer: a leading newline was dropped, and doubles kept 6 digits.
  a.pipeline_svg = "\nstarts with a newline\t\\";
  a.min_lr = 1.2345678901234567e-5;
  TrainConfig b;
  apply_toml_string(b, to_toml(a), "resolved");
  EXPECT_EQ(to_toml(a), to_toml(b));
  EXPECT_EQ(b.pipeline_svg, a.pipeline_svg);
  EXPECT_EQ(b.min_lr, a.min_lr);
}

TEST(Config, ReferenceListsEveryKey) {
  TrainConfig c;
  const std::string ref = config_reference_markdown();
  for (const auto& k : config_schema(c)) EXPECT_NE(ref.find("`--" + flag_name(k.key) + "`"), std::string::npos) << k.key;
}

}  // namespace
}  // namespace loom::train

namespace loom::train {
namespace {

TEST(Config, CommittedReferenceIsCurrent) {
  std::ifstream in(LOOM_SOURCE_DIR "/docs/configuration.md");
  ASSERT_TRUE(in.good()) << "docs/configuration.md is missing";
  const std::string committed((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(committed, config_reference_markdown())
      << "docs/configuration.md is stale: regenerate it with build/loom config-reference > docs/configuration.md";
}

}  // namespace
}  // namespace loom::train
