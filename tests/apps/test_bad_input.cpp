// Bad input is bounded before it allocates, blocks or runs away: each class of issue 23's
// list (thread counts, model sizes, special files as data, config or rank files, a `latest`
// link to itself, out_dir, negative sizes, sample lengths, a full disk under the metrics)
// gives one message naming the value or path and exit status 1, within seconds.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "apps/cli_test_util.hpp"
#include "loom/train/checkpoint.hpp"
#include "loom/train/config.hpp"
#include "run_command.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;

using loom::testing::expect_error;
using loom::testing::kTiny;
using loom::testing::run_loom;

// A run directory with one sharded checkpoint of the tiny model.
fs::path trained_run(const std::string& name) {
  const fs::path dir = loom::testing::fresh_temp_dir("loom_bad_input_" + name);
  const loom::testing::CommandResult r = run_loom("train " + kTiny + " --steps 1 --eval-batches 1 --checkpoint-format "
                                                  "sharded --out-dir " + dir.string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return dir;
}

TEST(CliBadInput, ThreadCountsAreBoundedByTheCpus) {
  expect_error("train " + kTiny + " --threads 100000", "threads (100000) must be between 0 (all cores) and ");
  expect_error("train " + kTiny + " --threads 100000", " x the ");
  expect_error("sample --checkpoint /nonexistent --threads 100000", "threads (100000) must be between 0");
  expect_error("verify --threads -1", "threads (-1) must be between 0");
}

// 10^8 blocks of width 16 would need terabytes: refused from the planner's numbers before
// any tensor exists (the test would otherwise die allocating, or take minutes).
TEST(CliBadInput, AModelLargerThanMemoryIsRefusedBeforeItIsBuilt) {
  const std::string need = "the model needs ";
  const std::string have = "as `loom train --dry-run` predicts, more than the ";
  expect_error("train " + kTiny + " --n-layer 100000000 --out-dir " + loom::testing::temp_path("huge"), need);
  expect_error("train " + kTiny + " --n-layer 100000000 --out-dir " + loom::testing::temp_path("huge"), have);
  expect_error("verify --n-layer 100000000 --data " LOOM_SOURCE_DIR "/data/tinyshakespeare.txt", have);
  expect_error("train " + kTiny + " --n-embd 2000000000 --n-head 1 --out-dir " + loom::testing::temp_path("huge"),
               "(state more than 1 EiB + ");

  // A checkpoint whose stored configuration is huge: `loom sample` and `loom convert` read it
  // and must check it before building the model.
  loom::train::TrainConfig stored;
  stored.model.n_layer = 100000000;
  stored.model.n_head = 2;
  stored.model.n_embd = 16;
  stored.data = LOOM_SOURCE_DIR "/data/tinyshakespeare.txt";
  stored.tokenizer = "byte";
  const fs::path dir = loom::testing::fresh_temp_dir("loom_bad_input_huge_checkpoint");
  const std::string path = (dir / "huge.safetensors").string();
  loom::train::write_checkpoint_file(path, {}, {0, loom::train::to_toml(stored), "byte", "adamw", 0});
  expect_error("sample --checkpoint " + path, "the model of checkpoint '" + path + "' needs ");
  expect_error("convert --from " + path + " --to " + (dir / "converted").string(), have);

  const loom::testing::CommandResult r = run_loom("train --dry-run");
  EXPECT_NE(r.output.find("# predicted memory per rank, state and the activations and logits kept for backward: "),
            std::string::npos)
      << r.output;
}

TEST(CliBadInput, DataAndConfigMustBeRegularFilesOfABoundedSize) {
  const fs::path dir = loom::testing::fresh_temp_dir("loom_bad_input_files");
  const std::string fifo = (dir / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string out = " --steps 1 --out-dir " + (dir / "run").string();
  expect_error("train " + kTiny + " --data /dev/zero" + out, "data file '/dev/zero' is a character device, not a regular file");
  expect_error("train " + kTiny + " --data " + fifo + out, "data file '" + fifo + "' is a FIFO (named pipe), not a regular file");
  expect_error("train " + kTiny + " --data " + dir.string() + out, "data file '" + dir.string() + "' is a directory");
  expect_error("train --config " + fifo + out, "config file '" + fifo + "' is a FIFO (named pipe), not a regular file");
  expect_error("train --config " + dir.string() + out, "config file '" + dir.string() + "' is a directory, not a regular file");
  // A sparse file: its size is real, its blocks are not, so this costs no disk.
  const fs::path big = dir / "big.txt";
  std::ofstream(big) << "x";
  fs::resize_file(big, (int64_t{1} << 30) + 1);
  expect_error("train " + kTiny + " --data " + big.string() + out,
               "data file '" + big.string() + "' is 1.0 GiB (1073741825 bytes), more than the limit of 1.0 GiB");
}

TEST(CliBadInput, OutDirMustBeADirectory) {
  expect_error("train " + kTiny + " --out-dir ''", "out_dir is empty: the run would write no metrics and no checkpoint");
  const std::string file = loom::testing::temp_path("out_dir_file");
  std::ofstream(file) << "not a directory";
  expect_error("train " + kTiny + " --steps 1 --out-dir " + file, "out_dir '" + file + "' is a regular file, not a directory");
  // Below a file: the filesystem's own error, with the path, is a Loom error too.
  expect_error("train " + kTiny + " --steps 1 --out-dir " + file + "/run", file + "/run");
  expect_error("convert --from /nonexistent --to ''", "--to is empty");
}

TEST(CliBadInput, DamagedCheckpointFilesAreNamed) {
  const fs::path dir = trained_run("damaged");
  const fs::path rank_file = dir / "checkpoint-00000001" / "rank-00000.safetensors";
  ASSERT_TRUE(fs::exists(rank_file));
  fs::remove(rank_file);
  fs::create_directory(rank_file);
  expect_error("sample --checkpoint " + dir.string(), "rank file '" + rank_file.string() + "' is a directory, not a regular file");
  fs::remove(rank_file);
  ASSERT_EQ(::mkfifo(rank_file.c_str(), 0600), 0);
  expect_error("sample --checkpoint " + dir.string(), "rank file '" + rank_file.string() + "' is a FIFO (named pipe)");
  expect_error("train " + kTiny + " --steps 2 --out-dir " + dir.string() + " --resume latest",
               "rank file '" + rank_file.string() + "' is a FIFO (named pipe)");

  fs::remove(dir / "latest");
  fs::create_symlink("latest", dir / "latest");
  expect_error("sample --checkpoint " + dir.string(), "'" + (dir / "latest").string() + "' is a symbolic link loop");
  expect_error("train " + kTiny + " --steps 2 --out-dir " + dir.string() + " --resume latest", "is a symbolic link loop");
}

TEST(CliBadInput, NegativeAndRunawaySizesAreRefused) {
  expect_error("train --padded-vocab-size -1 --dry-run", "padded_vocab_size must be >= 0 (0: the vocabulary rounded up), got -1");
  expect_error("sample --checkpoint /nonexistent --tokens 1000000000", "tokens must be between 0 and 100000, got 1000000000");
  expect_error("sample --checkpoint /nonexistent --tokens 1e9", "--tokens");  // not a count: CLI11 refuses it, status 1
  expect_error("sample --checkpoint /nonexistent --tokens -5", "tokens must be between 0 and 100000, got -5");
}

// /dev/full takes an open for append and fails every write with ENOSPC: a full disk under
// one file. Metrics and memory.json must fail the run, never be left empty.
TEST(CliBadInput, AFullDiskUnderTheMetricsIsAnError) {
  const fs::path dir = loom::testing::fresh_temp_dir("loom_bad_input_full_metrics");
  fs::create_symlink("/dev/full", dir / "metrics.jsonl");
  expect_error("train " + kTiny + " --steps 2 --eval-batches 1 --out-dir " + dir.string(),
               "cannot write metrics file '" + (dir / "metrics.jsonl").string() + "': No space left on device");

  const fs::path dir2 = loom::testing::fresh_temp_dir("loom_bad_input_full_memory");
  fs::create_symlink("/dev/full", dir2 / "memory.json");
  expect_error("train " + kTiny + " --steps 2 --eval-batches 1 --out-dir " + dir2.string(),
               "cannot write '" + (dir2 / "memory.json").string() + "': No space left on device");
}

}  // namespace
