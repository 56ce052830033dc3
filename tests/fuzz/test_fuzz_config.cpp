// Fuzzing the configuration readers: mutated TOML files and mutated flag values either
// configure a run or give a loom::Error, and whatever is accepted prints back (to_toml,
// what checkpoints store) to TOML that reads as the same configuration.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <stdexcept>

#include "fuzz/mutator.hpp"
#include "loom/error.hpp"
#include "loom/train/config.hpp"
#include "test_util.hpp"

namespace loom::train {
namespace {

void expect_round_trip(TrainConfig& c) {
  const std::string text = to_toml(c);
  TrainConfig again;
  apply_toml_string(again, text, "printed configuration");
  if (to_toml(again) != text) throw std::logic_error("to_toml does not read back as itself:\n" + text);
}

TEST(Fuzz, ConfigToml) {
  TrainConfig defaults;
  const std::vector<std::string> seeds = {
      loom::testing::read_file(LOOM_SOURCE_DIR "/configs/shakespeare.toml"), to_toml(defaults),
      "[train]\ndp = 2\npp = 2\ntp = 2\nzero = 1\nmicro_batches = 4\nschedule = \"interleaved\"\nchunks = 2\n"
      "pp_layers = \"1,3\"\n[model]\nn_layer = 4\n",
      "[optim]\nlr = 1e-3\nmin_lr = 0.0\n[run]\nresume = \"auto\"\nout_dir = 'x'\nkeep_checkpoints = 2\n"};
  const testing::FuzzResult r = testing::fuzz_for("config TOML", seeds, [](const std::string& text) {
    TrainConfig c;
    apply_toml_string(c, text, "fuzz.toml");
    c.validate();
    expect_round_trip(c);
  }, 8.0);
  EXPECT_EQ(r.failure, "");
  EXPECT_GT(r.accepted, 0);
  EXPECT_GT(r.rejected, r.inputs / 10) << "the mutations should break most inputs";
  testing::print_summary(r, "config TOML");
}

// A flag is "key=value" here: the value goes through the same set_from_string as --key value.
TEST(Fuzz, ConfigFlags) {
  const std::vector<std::string> seeds = {"n_layer=4",     "lr=3e-3",       "pp_layers=1,2,3", "on_nan=skip",
                                          "sequence_parallel=true", "bucket_mb=0.5", "seed=1337",
                                          "resume=auto",   "net_gbps=12.5", "hsdp_shard=2"};
  const testing::FuzzResult r = testing::fuzz_for("config flags", seeds, [](const std::string& flag) {
    TrainConfig c;
    c.out_dir = "runs/x";
    const size_t eq = flag.find('=');
    const std::string key = flag.substr(0, eq);
    bool known = false;
    for (const ConfigKey& k : config_schema(c))
      if (k.key == key) {
        set_from_string(k, eq == std::string::npos ? "" : flag.substr(eq + 1));
        known = true;
      }
    check(known, "unknown key '", key, "'");  // the CLI rejects unknown flags itself
    c.validate();
    expect_round_trip(c);
  }, 4.0);
  EXPECT_EQ(r.failure, "");
  EXPECT_GT(r.accepted, 0);
  testing::print_summary(r, "config flags");
}

}  // namespace
}  // namespace loom::train
