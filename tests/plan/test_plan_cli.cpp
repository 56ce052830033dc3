// `loom plan` end to end: TOML files and presets, the explanation of the runners-up, one
// layout priced on its own, this machine measured, and bad input as one clear message.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "run_command.hpp"

namespace {

std::pair<int, std::string> plan(const std::string& args) {
  const loom::testing::CommandResult r = loom::testing::run_loom("plan " + args);
  return {r.exit_code, r.output};
}

const std::string kSc21 = " --recompute on --zero 0 --sequence-parallel off";

TEST(PlanCli, FilesGiveThePresetsRankingWithReasons) {
  const auto [code, out] = plan("--model " LOOM_SOURCE_DIR "/configs/plan/sc21-145b.toml --cluster-file " LOOM_SOURCE_DIR
                                "/configs/plan/dgx-a100.toml --gpus 1536 --global-batch 2304 --top 4" + kSc21);
  ASSERT_EQ(code, 0) << out;
  const auto [preset_code, preset] = plan("--model sc21-145b --cluster dgx-a100 --gpus 1536 --global-batch 2304 --top 4" + kSc21);
  ASSERT_EQ(preset_code, 0) << preset;
  // Same rows after the header line (which names the cluster file).
  EXPECT_EQ(out.substr(out.find('\n')), preset.substr(preset.find('\n')));
  EXPECT_NE(out.find("why the runners-up lose"), std::string::npos) << out;
  EXPECT_NE(out.find("tp comm +"), std::string::npos) << out;
  EXPECT_NE(out.find("% full]"), std::string::npos) << out;
}

// A long sequence: the search tries cp, shows the ring's exposed time and hidden share, and
// prices one cp layout on its own.
TEST(PlanCli, LongSequencesGetTheCpAxis) {
  const auto [code, out] = plan("--model gpt3-1.3b --seq 32768 --gpus 8 --global-batch 8 --top 3");
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("cp ring (hidden)"), std::string::npos) << out;
  EXPECT_NE(out.find(" x cp 2, mb"), std::string::npos) << out;
  EXPECT_NE(out.find("% hidden)"), std::string::npos) << out;
  const auto [one_code, one] = plan("--model gpt3-1.3b --seq 32768 --gpus 8 --global-batch 8 --dp 2 --cp 4 --json");
  ASSERT_EQ(one_code, 0) << one;
  const nlohmann::json j = nlohmann::json::parse(one);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["cp"], 4);
  EXPECT_GT(j[0]["time_s"]["cp_ring_link"].get<double>(), j[0]["time_s"]["cp_ring_exposed"].get<double>());
  const auto [bad_code, bad] = plan("--gpus 4 --dp 1 --cp 3");
  EXPECT_EQ(bad_code, 1);
  EXPECT_NE(bad.find("dp (1) x pp (1) x tp (1) x cp (3) = 3 != --gpus 4"), std::string::npos) << bad;
}

TEST(PlanCli, OneLayoutOnThisMachine) {
  const auto [code, out] = plan("--cluster local --layers 2 --hidden 64 --heads 4 --seq 64 --vocab 128 --gpus 2 "
                                "--global-batch 8 --dp 1 --pp 2 --micro-batch-size 2 --recompute off --json");
  ASSERT_EQ(code, 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_TRUE(j[0]["valid"].get<bool>());
  EXPECT_EQ(j[0]["pp"], 2);
  EXPECT_EQ(j[0]["micro_batches"], 4);
  EXPECT_GT(j[0]["step_s"].get<double>(), 0.0);
  EXPECT_GT(j[0]["time_s"]["pp_comm"].get<double>(), 0.0);
}

// This machine measured once and saved: planning from the file prices every layout as the
// measuring run did.
TEST(PlanCli, AMeasuredMachineSavedAndPlannedAgain) {
  const std::string file = ::testing::TempDir() + "loom_plan_saved_local.toml";
  const std::string model = " --layers 2 --hidden 64 --heads 4 --seq 64 --vocab 128 --gpus 2 --global-batch 8 "
                            "--recompute off --json";
  const auto [code, measured] = plan("--cluster local --save-cluster " + file + model);
  ASSERT_EQ(code, 0) << measured;
  const auto [again_code, again] = plan("--cluster " + file + model);
  ASSERT_EQ(again_code, 0) << again;
  const nlohmann::json a = nlohmann::json::parse(measured), b = nlohmann::json::parse(again);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_GT(a.size(), 1u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["tp"], b[i]["tp"]) << i;
    EXPECT_EQ(a[i]["micro_batch_size"], b[i]["micro_batch_size"]) << i;
    EXPECT_EQ(a[i]["memory_bytes_per_device"], b[i]["memory_bytes_per_device"]) << i;
    EXPECT_NEAR(a[i]["step_s"].get<double>(), b[i]["step_s"].get<double>(), 1e-9 * a[i]["step_s"].get<double>()) << i;
  }
  const auto [write_code, write_error] = plan("--save-cluster /nonexistent/dir/c.toml --gpus 8 --global-batch 64");
  EXPECT_EQ(write_code, 1);
  EXPECT_NE(write_error.find("cannot create '/nonexistent/dir/"), std::string::npos) << write_error;
}

TEST(PlanCli, BadInputIsOneMessage) {
  auto expect_error = [](const std::string& args, const std::string& message) {
    const auto [code, out] = plan(args);
    EXPECT_EQ(code, 1) << out;
    EXPECT_NE(out.find(message), std::string::npos) << "loom plan " << args << " printed:\n" << out;
  };
  expect_error("--gpus 4 --dp 3", "dp (3) x pp (1) x tp (1) = 3 != --gpus 4");
  expect_error("--model-file /nonexistent/m.toml", "cannot open description file '/nonexistent/m.toml': No such file or directory");
  expect_error("--cluster moon", "unknown cluster 'moon'");
  expect_error("--model gpt3-175b --cluster local-default --gpus 2 --global-batch 8", "no layout fits: out of memory");
}

}  // namespace
