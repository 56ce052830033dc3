// The `loom` binary end to end: bad input gives one clear message and a
// non-zero exit, never a crash; train -> sample works from the command line.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <string>

#include "apps/cli_test_util.hpp"
#include "run_command.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;

using Result = loom::testing::CommandResult;
using loom::testing::expect_error;
using loom::testing::kTiny;
using loom::testing::run_loom;
using loom::testing::temp_path;

TEST(Cli, OutputThatCannotBeWrittenFailsTheCommand) {
  // A command's stdout is its result: a full disk (/dev/full) fails it by name, on stderr.
  const Result r = loom::testing::run_command(std::string("{ ") + LOOM_BINARY +
                                              " plan --model gpt2-small --cluster dgx-a100 --gpus 8 --global-batch 8 "
                                              "> /dev/full; }");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("loom: error: cannot write the output: No space left on device"), std::string::npos)
      << r.output;
}

TEST(Cli, EverySubcommandHasHelpWithAnExample) {
  for (const std::string sub :
       {"train", "sample", "generate", "bench", "schedule", "verify", "plan",
        "report", "convert", "eval", "tokenize", "config-reference"}) {
    const Result r = run_loom(sub + " --help");
    EXPECT_EQ(r.exit_code, 0) << sub << "\n" << r.output;
    EXPECT_NE(r.output.find("(example: "), std::string::npos)
        << sub << " --help printed:\n"
        << r.output;
    EXPECT_NE(r.output.find("Options:"), std::string::npos)
        << sub << " --help printed:\n"
        << r.output;
  }
}

TEST(Cli, UnknownFlagSuggestsTheClosest) {
  expect_error("train --n-layr 2", "unknown argument '--n-layr' for 'loom "
                                   "train' (did you mean '--n-layer'?)");
}

TEST(Cli, BadFlagValues) {
  expect_error("train --steps ten", "--steps: expected integer, got 'ten'");
  expect_error("train " + kTiny + " --n-head 3",
               "n_embd (16) must be divisible by n_head (3)");
  expect_error("train " + kTiny + " --block-size 0",
               "block_size must be >= 1, got 0");
}

TEST(Cli, MissingDataFile) {
  expect_error("train " + kTiny + " --data /nonexistent/corpus.txt",
               "cannot open data file '/nonexistent/corpus.txt'");
}

TEST(Cli, BadConfigFile) {
  const std::string path = temp_path("bad.toml");
  std::ofstream(path) << "[model]\nn_layers = 2\n";
  expect_error("train --config " + path,
               "unknown key 'n_layers' in [model] (did you mean 'n_layer'?)");
  expect_error("train --config /nonexistent.toml",
               "cannot open config file '/nonexistent.toml'");
}

TEST(Cli, CorruptedCheckpoint) {
  const std::string path = temp_path("garbage.safetensors");
  std::ofstream(path) << "this is not a checkpoint at all";
  expect_error("sample --checkpoint " + path,
               "is truncated or not a tensor file");
  expect_error("sample --checkpoint /nonexistent/run",
               "no checkpoint at '/nonexistent/run");
}

TEST(Cli, DryRunPrintsTheResolvedConfig) {
  const Result r = run_loom("train --config " LOOM_SOURCE_DIR
                            "/configs/shakespeare.toml --n-layer 3 --dry-run");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("n_layer = 3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("predicted state memory"), std::string::npos)
      << r.output;
}

// A dry run reads no data but says whether the run could open it: a wrong --data path was
// a clean exit 0 that the real run (often a queued job) then died on.
TEST(Cli, DryRunSaysWhetherTheDataFileOpens) {
  const Result missing = run_loom("train --data /nonexistent/corpus.txt --dry-run");
  EXPECT_EQ(missing.exit_code, 0) << missing.output;
  EXPECT_NE(missing.output.find("loom: warning: cannot open data file '/nonexistent/corpus.txt'"), std::string::npos)
      << missing.output;
  EXPECT_NE(missing.output.find("# data: cannot open data file '/nonexistent/corpus.txt': No such file or directory: "
                                "`loom train` would stop there"),
            std::string::npos)
      << missing.output;
  const Result present = run_loom("train --data " LOOM_SOURCE_DIR "/data/tinyshakespeare.txt --dry-run");
  EXPECT_EQ(present.exit_code, 0) << present.output;
  EXPECT_NE(present.output.find("# data: '" LOOM_SOURCE_DIR "/data/tinyshakespeare.txt', 1.1 MiB"), std::string::npos)
      << present.output;
  EXPECT_EQ(present.output.find("warning"), std::string::npos) << present.output;
}

// --config's help names every TOML table a key may sit in; it once left out [parallel], where
// the layout keys (dp, tp, zero, ...) live.
TEST(Cli, ConfigHelpNamesEveryTable) {
  const Result help = run_loom("train --help");
  std::smatch line;
  ASSERT_TRUE(std::regex_search(help.output, line, std::regex("--config TEXT[^\\n]*"))) << help.output;
  std::set<std::string> tables;  // every key's table, from its help's [table.key, default ...]
  const std::regex row("\\[([a-z]+)\\.[a-z_0-9]+, default");
  for (auto it = std::sregex_iterator(help.output.begin(), help.output.end(), row); it != std::sregex_iterator(); ++it)
    tables.insert((*it)[1]);
  EXPECT_GE(tables.size(), 6u) << help.output;
  for (const std::string& table : tables)
    EXPECT_NE(line.str().find("[" + table + "]"), std::string::npos) << table << " missing from: " << line.str();
}

// ZeRO-3's gathered units are bytes in the state line (next to 16 Psi/N in fp32, 18 Psi/N in
// bf16 under AdamW) and in the memory check's figure, the same count (plan/zero_gathered.hpp);
// they were the words "gathered units (one transformer block each)", which the check left out.
TEST(Cli, DryRunCountsZeroThreesGatheredUnitsInBytes) {
  for (const std::string precision : {"fp32", "bf16"}) {
    const Result r = run_loom("train --dp 2 --zero 3 --precision " + precision + " --dry-run");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const std::string bytes = "([0-9]+(\\.[0-9])? (B|KiB|MiB|GiB))", psi = precision == "bf16" ? "18" : "16";
    const std::regex state(" = " + bytes + " \\(" + psi + " Psi/N\\) \\+ gathered units " + bytes +
                           " \\(at most at once: the root unit");
    const std::regex check("\\(state " + bytes + " \\+ gathered units " + bytes + " \\+ activations ");
    std::smatch in_state, in_check;
    ASSERT_TRUE(std::regex_search(r.output, in_state, state)) << precision << "\n" << r.output;
    ASSERT_TRUE(std::regex_search(r.output, in_check, check)) << precision << "\n" << r.output;
    EXPECT_EQ(in_state[4].str(), in_check[4].str()) << precision;
  }
  // No units are gathered below ZeRO-3; ZeRO-2 holds its units' gradients, in bytes too.
  const Result zero2 = run_loom("train --dp 2 --zero 2 --dry-run");
  EXPECT_NE(zero2.output.find("+ full gradients of the units in backward and in their reduce-scatter, at most "),
            std::string::npos)
      << zero2.output;
  EXPECT_EQ(run_loom("train --dp 2 --zero 1 --dry-run").output.find("gathered units"), std::string::npos);
}

// A GCN's dry run describes the GCN its graph sizes (not a GPT of the default widths), the
// graph data a rank holds (on a 3D grid the share of the rank holding the most), and on a grid
// what rank 0 moves per epoch along each axis; a GPT layout for it is refused.
TEST(Cli, GcnDryRunDescribesTheGraphsModel) {
  const std::string cora = "train --config " LOOM_SOURCE_DIR "/configs/cora.toml --data " LOOM_SOURCE_DIR "/data/cora";
  const Result r = run_loom(cora + " --precision bf16 --tp-3d 2,1,2 --dry-run");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("# model: 23063 parameters | GCN 1433 -> 16 -> 7"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("predicted memory on grid rank ("), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("), the one holding the most (bf16)"), std::string::npos) << r.output;
  // Cora's cites list some links twice (either way): its blocks' entries bound them from above.
  EXPECT_NE(r.output.find(" (at most: the entries counted into its blocks"), std::string::npos) << r.output;
  // Its share of the graph: (2708 / 2 / 2) x 1433 features, not the whole 2708 x 1433 a rank
  // alone holds.
  EXPECT_NE(r.output.find("# graph data per rank: features 3.7 MiB + "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("# 3D grid 2,1,2 (Plexus), as `loom plan` prices it: rank 0 peaks at about"), std::string::npos) << r.output;
  const Result serial = run_loom(cora + " --dry-run");
  EXPECT_NE(serial.output.find("predicted memory on one rank (fp32"), std::string::npos) << serial.output;
  EXPECT_NE(serial.output.find("# graph data per rank: features 14.8 MiB + "), std::string::npos) << serial.output;
  EXPECT_NE(serial.output.find(" (exact) = "), std::string::npos) << serial.output;
  EXPECT_EQ(r.output.find("10795008 parameters"), std::string::npos) << r.output;  // the default GPT's
  expect_error(cora + " --tp 2 --dry-run", "pp (1) and tp (2) are GPT layouts");
}

// `loom plan --model gcn` ranks the graph's grids, in the precision asked for.
TEST(Cli, GcnPlanRanksGridsInItsPrecision) {
  const std::string plan = "plan --model gcn --graph " LOOM_SOURCE_DIR "/data/cora --gpus 4";
  const Result fp32 = run_loom(plan), bf16 = run_loom(plan + " --precision bf16");
  EXPECT_EQ(fp32.exit_code, 0) << fp32.output;
  EXPECT_EQ(bf16.exit_code, 0) << bf16.output;
  EXPECT_NE(fp32.output.find("GCN 2708 nodes, 13264 non-zeros, 1433 -> 16 x 1 -> 7"), std::string::npos) << fp32.output;
  EXPECT_NE(fp32.output.find("fp32 on the wire"), std::string::npos) << fp32.output;
  EXPECT_NE(bf16.output.find("bf16: activation sums and W's gathers at 2 bytes a value"), std::string::npos) << bf16.output;
}

// comm_timeout: the config file, then LOOM_COMM_TIMEOUT, then --comm-timeout,
// each overriding the one before.
TEST(Cli, CommTimeoutFromFileEnvironmentAndFlag) {
  const std::string file = temp_path("timeout.toml");
  std::ofstream(file) << "[parallel]\ncomm_timeout = 30\n";
  auto resolved = [&](const std::string &env, const std::string &args) {
    const Result r =
        loom::testing::run_command(env + " " LOOM_BINARY " train --config " +
                                   file + " " + args + " --dry-run");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const size_t at = r.output.find("comm_timeout = ");
    return at == std::string::npos
               ? r.output
               : r.output.substr(at, r.output.find('\n', at) - at);
  };
  EXPECT_EQ(resolved("env -u LOOM_COMM_TIMEOUT", ""), "comm_timeout = 30");
  EXPECT_EQ(resolved("env LOOM_COMM_TIMEOUT=9", ""), "comm_timeout = 9");
  EXPECT_EQ(resolved("env LOOM_COMM_TIMEOUT=9", "--comm-timeout 7"),
            "comm_timeout = 7");
  EXPECT_EQ(resolved("env -u LOOM_COMM_TIMEOUT", "--comm-timeout 0"),
            "comm_timeout = 0");
  expect_error("train --comm-timeout -1 --dry-run",
               "comm_timeout must be seconds >= 0 (0 = off), got -1");
  const Result bad = loom::testing::run_command(
      "env LOOM_COMM_TIMEOUT=soon " LOOM_BINARY " train --dry-run");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(
      bad.output.find("LOOM_COMM_TIMEOUT must be seconds >= 0, got 'soon'"),
      std::string::npos)
      << bad.output;
  fs::remove(file);
}

// Under a grid every rank holds the same shapes: one activation figure, each grid rank's
// (Trainer3D.DryRunActivationsOfEveryGridRankAreTheTrackersPeak holds it to every rank's tracker).
TEST(Cli, DryRunPrintsAGridRanksActivations) {
  const Result r = run_loom("train --tp-3d 2,2,1 --dry-run");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("# predicted activations per grid rank, the same on every rank of 2,2,1 (fp32, micro-batch "),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("heads and MLP over row 2, qkv and fc inputs over col 2): a block keeps "), std::string::npos)
      << r.output;
  // A grid rank's parameters, not the whole model's (C = 384, 6 blocks): a block's Linear
  // weights 12 C^2 / 4, its biases 3C/2 + C/2 + 4C/2 + C/2, its LayerNorms 4C, and the tables
  // (128 + 256) x C and the final LayerNorm 2C whole: 6 x 445632 + 148224.
  EXPECT_NE(r.output.find("# model: 10795008 parameters, 2822016 per grid rank of tp_3d 2,2,1 ("), std::string::npos)
      << r.output;
}

TEST(Cli, DryRunShowsTheRankMapOfALayout) {
  const Result r = run_loom("train --dp 2 --pp 2 --tp 2 --dry-run");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("# mesh dp(2) x pp(2) x cp(1) x tp(2) over 8 ranks "
                          "(tp varies fastest)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("tp groups: [0 1] [2 3] [4 5] [6 7]"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("# pipeline stages (1f1b): pp rank 0: blocks 0-"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("+ final norm and LM head"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("# predicted memory per pipeline rank (state + activations held at once): pp rank 0 "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("; pp rank 1 "), std::string::npos) << r.output;
  expect_error("train --dp 0 --dry-run",
               "parallel degrees must be >= 1, got dp(0) x pp(1) x tp(1)");
  expect_error(
      "train --pp 2 --pp-layers 1,x --dry-run",
      "pp_layers must list blocks per stage like \"3,3,2,2\", got '1,x'");
  expect_error("train --pp 2 --pp-layers 4,3 --dry-run",
               "pp_layers adds up to 7 blocks, the model has 6");
  expect_error("train " + kTiny + " --dp 2",
               "layout dp(2) x pp(1) x cp(1) x tp(1) needs 2 processes: start "
               "it with mpirun -np 2");
  // Context parallelism: cp between pp and tp, each rank's zig-zag chunks, and
  // a block size that 2 x cp does not divide refused by name.
  const Result cp = run_loom("train --dp 2 --cp 2 --dry-run");
  EXPECT_EQ(cp.exit_code, 0) << cp.output;
  EXPECT_NE(cp.output.find("cp groups: [0 1] [2 3]"), std::string::npos)
      << cp.output;
  EXPECT_NE(cp.output.find("cp rank 0: chunks 0, 3 ("), std::string::npos)
      << cp.output;
  expect_error("train --cp 3 --dry-run",
               "block_size (256) must be divisible by 6");
}

TEST(Cli, SchedulePrintsActionsBubbleAndTimeline) {
  const std::string svg = temp_path("1f1b.svg");
  fs::remove(svg);
  Result r = run_loom(
      "schedule --pp 4 --micro-batches 8 --schedule 1f1b --svg " + svg);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(
                "rank 0: F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7\n"),
            std::string::npos)
      << r.output;
  EXPECT_NE(
      r.output.find(
          "bubble / compute time: 0.3750   theory (p-1)/m = 3/8 = 0.3750"),
      std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("bubble share of the timeline: 0.2727   theory "
                          "(p-1)/(m + p-1) = 0.2727"),
            std::string::npos)
      << r.output;
  EXPECT_NE(
      r.output.find("peak micro-batches of activations held per rank: 4 3 2 1"),
      std::string::npos)
      << r.output;
  std::ifstream in(svg);
  const std::string picture((std::istreambuf_iterator<char>(in)),
                            std::istreambuf_iterator<char>());
  EXPECT_EQ(picture.rfind("<svg", 0), 0u) << picture.substr(0, 200);
  r = run_loom(
      "schedule --pp 4 --micro-batches 8 --schedule interleaved --chunks 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("theory (p-1)/(m v) = 3/16 = 0.1875"),
            std::string::npos)
      << r.output;
  expect_error(
      "schedule --pp 4 --micro-batches 6 --schedule interleaved --chunks 2",
      "the interleaved schedule needs the micro-batches (6) to be a multiple "
      "of pp (4)");
  expect_error(
      "schedule --schedule zb",
      "unknown pipeline schedule 'zb' (expected gpipe, 1f1b or interleaved)");
}

TEST(Cli, ScheduleFileIsCheckedBeforeUse) {
  const std::string good = temp_path("good_schedule.txt"),
                    bad = temp_path("bad_schedule.txt");
  std::ofstream(good) << "# 1F1B on two ranks\nF0 F1 B0 B1\nF0 B0 F1 B1\n";
  std::ofstream(bad) << "F0 B0 F1 B1\nF1 B1 F0 B0\n";
  const Result r = run_loom("schedule --file " + good);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1: F0 B0 F1 B1"), std::string::npos)
      << r.output;
  expect_error("schedule --file " + bad,
               "custom schedule " + bad +
                   ": deadlock: rank 0: B0 waits for the gradient of "
                   "micro-batch 0 from rank 1, and rank 1: F1 waits for "
                   "the activation of micro-batch 1 from rank 0, which is "
                   "itself waiting (a cycle)");
  expect_error("schedule --file " + good + " --pp 3",
               "--pp 3 disagrees with " + good + ", which has 2");
  expect_error("schedule --file /nonexistent/schedule.txt",
               "cannot open schedule file '/nonexistent/schedule.txt'");
}

// A run ends saying what it did and what to run next: it ended on the memory line, with no
// word of the time it took or of the commands that read the run directory.
TEST(Cli, TrainingEndsWithASummaryAndTheNextCommands) {
  const std::string dir = temp_path("summary");
  fs::remove_all(dir);
  const Result r = run_loom("train " + kTiny + " --steps 3 --eval-batches 1 --out-dir " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t last = r.output.rfind("\ndone: 3 steps in ");
  ASSERT_NE(last, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find('\n', last + 1), r.output.size() - 1) << "not the last line:\n" << r.output;
  EXPECT_NE(r.output.find(" of training, ", last), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" tok/s on average; `loom report " + dir + "` writes its report.html, `loom sample "
                          "--checkpoint " + dir + "` samples from it\n", last),
            std::string::npos)
      << r.output;
  // A resume with nothing left to train says so instead.
  const Result again = run_loom("train " + kTiny + " --steps 3 --eval-batches 1 --resume latest --out-dir " + dir);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(again.output.find("done:"), std::string::npos) << again.output;
  EXPECT_NE(again.output.find("nothing to train"), std::string::npos) << again.output;
  fs::remove_all(dir);
}

TEST(Cli, TrainThenSampleThenResume) {
  const std::string dir = temp_path("run");
  fs::remove_all(dir);
  Result r =
      run_loom("train " + kTiny +
               " --steps 4 --log-every 2 --eval-batches 1 --out-dir " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step     4/4 | loss"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("val loss"), std::string::npos) << r.output;
  r = run_loom("sample --checkpoint " + dir +
               " --prompt ROMEO: --tokens 20 --seed 3 --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("ROMEO:", 0), 0u) << r.output;
  EXPECT_GE(r.output.size(), 26u);
  // Batched prompts (one JSON line each, in file order) and continuous batching
  // from stdin.
  const std::string prompts = temp_path("prompts.txt");
  std::ofstream(prompts)
      << "ROMEO:\n{\"prompt\": \"JULIET:\", \"tokens\": 5}\n";
  r = run_loom("sample --checkpoint " + dir + " --prompts-file " + prompts +
               " --tokens 8 --batch 2 --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("{\"finish\":\"length\",\"id\":0,\"text\":\"ROMEO:"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("\"id\":1,\"text\":\"JULIET:"), std::string::npos)
      << r.output;
  r = loom::testing::run_command(
      "printf 'ROMEO:\\n\\nAB\\n' | " + std::string(LOOM_BINARY) +
      " generate --checkpoint " + dir + " --tokens 4 --batch 1 --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\"id\":1,\"text\":\"AB"), std::string::npos)
      << r.output;
  expect_error("sample --checkpoint " + dir + " --prompt ''",
               "the prompt must not be empty");
  expect_error(
      "sample --checkpoint " + dir + " --prompt " + std::string(17, 'a'),
      "the prompt is 17 tokens, longer than the model's context of 16 tokens");
  std::ofstream(prompts) << "{\"prompt\": \"a\", \"temperature\": 2}\n";
  expect_error("sample --checkpoint " + dir + " --prompts-file " + prompts,
               "line 1: unknown key \"temperature\"");
  expect_error("sample --checkpoint " + dir +
                   " --prompts-file /nonexistent/prompts.txt",
               "/nonexistent/prompts.txt");
  expect_error("sample --checkpoint " + dir + " --tp 2",
               "--tp 2 needs 2 processes");
  r = run_loom("train " + kTiny + " --steps 6 --eval-batches 1 --out-dir " +
               dir + " --resume latest");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("at step 4"), std::string::npos) << r.output;
  expect_error("sample --checkpoint " + dir + " --prompt \"~~\xe2\x98\x83\"",
               "is not in the tokenizer's vocabulary");
}

// The README's trap: a second `loom train` into the same out_dir. A fresh run
// is refused, a resume of another model names what differs and changes nothing,
// a live owner's lock keeps a run out, a dead owner's is taken over, and
// --overwrite starts over.
TEST(Cli, ARunDirectoryHoldsOneRun) {
  const std::string dir = temp_path("one_run");
  fs::remove_all(dir);
  const std::string train =
      "train " + kTiny + " --steps 2 --eval-batches 1 --out-dir " + dir;
  Result r = run_loom(train);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string metrics =
      loom::testing::read_file(fs::path(dir) / "metrics.jsonl");
  expect_error(
      train,
      "out_dir '" + dir +
          "' already holds a run (checkpoint-00000002.safetensors, latest, "
          "metrics.jsonl): continue it with --resume latest|auto, start over "
          "with --overwrite");
  expect_error(train + " --resume latest --n-layer 2 --n-head 4",
               "holds a different model: n_layer 1 (checkpoint) vs 2 (config), "
               "n_head 2 vs 4; resume with the "
               "checkpoint's values or start a new out_dir");
  EXPECT_EQ(loom::testing::read_file(fs::path(dir) / "metrics.jsonl"), metrics)
      << "a refused run wrote metrics";

  const fs::path lock = fs::path(dir) / ".loom.lock";
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  auto write_lock = [&](int64_t pid) {
    std::ofstream(lock) << "{\"host\": \"" << host << "\", \"pid\": " << pid
                        << "}\n";
  };
  write_lock(getpid()); // this test: alive, and not the loom process
  expect_error(train + " --resume latest --steps 3",
               "is in use by pid " + std::to_string(getpid()) + " on host " +
                   host);
  const pid_t child = fork();
  if (child == 0)
    _exit(0);
  waitpid(child, nullptr, 0);
  write_lock(child); // a process that has ended
  r = run_loom(train + " --resume latest --steps 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("taking over the lock of '" + dir + "' from pid " +
                          std::to_string(child)),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(lock)) << "the run removes its lock when it ends";

  r = run_loom(train + " --overwrite");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(
      r.output.find("overwrite: deleted the previous run in '" + dir +
                    "' (checkpoint-00000002.safetensors, "
                    "checkpoint-00000003.safetensors, latest, metrics.jsonl)"),
      std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(fs::path(dir) / "checkpoint-00000003.safetensors"));
}

} // namespace
