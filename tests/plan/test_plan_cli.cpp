// `loom plan` end to end: TOML files and presets, the explanation of the runners-up, one
// layout priced on its own, this machine measured, and bad input as one clear message.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
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

// The layouts left out are counted by reason, each with a layout's own words of what did not
// divide; it read "rejected 60 layout(s): batch do not divide or fit the layout".
TEST(PlanCli, RejectedLayoutsSayWhatDidNotDivide) {
  const auto [code, out] = plan("--model gpt3-175b --cluster dgx-a100 --gpus 1024 --global-batch 1536");
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(out.find("do not divide or fit"), std::string::npos) << out;
  EXPECT_NE(out.find(" layout(s) for batch, e.g. dp "), std::string::npos) << out;
  EXPECT_NE(out.find(": dp x micro-batch "), std::string::npos) << out;
  EXPECT_NE(out.find(" does not divide the global batch 1536"), std::string::npos) << out;
  EXPECT_NE(out.find(" layout(s) for layers, e.g. "), std::string::npos) << out;
  EXPECT_NE(out.find(" layout(s) for out of memory, e.g. "), std::string::npos) << out;
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

// Selective recompute: searched by default (GPT-3 175B on 64 A100s trains best with it), priced
// on every layout where it changes anything by the bare flag (as loom train's) or `on`, never by
// `off`; one layout priced with it on its own; a bad value named.
TEST(PlanCli, SelectiveRecomputeIsSearchedOrAskedFor) {
  const std::string gpt3 = "--model gpt3-175b --gpus 64 --global-batch 64";
  const auto [code, out] = plan(gpt3 + " --top 1");
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find(", mb 1, selective "), std::string::npos) << out;
  const auto selective_layouts = [&](const std::string& flags) {
    const auto [c, json] = plan(gpt3 + " --json " + flags);
    EXPECT_EQ(c, 0) << json;
    int on = 0, off = 0;
    for (const nlohmann::json& l : nlohmann::json::parse(json)) (l["selective_recompute"].get<bool>() ? on : off)++;
    return std::pair{on, off};
  };
  const auto [any_on, any_off] = selective_layouts("");
  EXPECT_GT(any_on, 0);
  EXPECT_GT(any_off, 0);
  for (const std::string flag : {"--selective-recompute", "--selective-recompute on", "--selective-recompute=on"})
    EXPECT_EQ(selective_layouts(flag + " --recompute off").second, 0) << flag;
  EXPECT_EQ(selective_layouts("--selective-recompute off").first, 0);
  const auto [one_code, one] = plan(gpt3 + " --dp 1 --pp 8 --tp 8 --selective-recompute --json");
  ASSERT_EQ(one_code, 0) << one;
  EXPECT_TRUE(nlohmann::json::parse(one)[0]["selective_recompute"].get<bool>()) << one;
  const auto [bad_code, bad] = plan("--selective-recompute=maybe");
  EXPECT_EQ(bad_code, 1);
  EXPECT_NE(bad.find("--selective-recompute: maybe not in {on,off,any}"), std::string::npos) << bad;
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

// One 3D grid priced on its own (bench/plan_vs_measured.sh SET=tp3d sets it beside a run):
// the grid in the layout, the batch split over depth, its ranks in the core sharing of a
// CPU's step (an undisturbed step at least the two ranks' turns on one core), and a grid that
// does not fit the devices named.
TEST(PlanCli, OneThreeDGridPricedOnItsOwn) {
  // local-default's 2 cores, with all 4 ranks on its one node.
  const std::string file = ::testing::TempDir() + "/plan_3d_cluster.toml";
  ASSERT_EQ(plan("--cluster local-default --gpus 1 --layers 2 --hidden 64 --heads 4 --seq 32 --save-cluster " + file).first, 0);
  std::string toml;
  {
    std::ifstream in(file);
    toml.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const size_t at = toml.find("devices_per_node = 2");
  ASSERT_NE(at, std::string::npos) << toml;
  toml.replace(at, 20, "devices_per_node = 4");
  std::ofstream(file) << toml;
  const auto [code, out] = plan("--cluster-file " + file + " --layers 2 --hidden 64 --heads 4 --seq 32 --vocab 128 --gpus 4 "
                                "--global-batch 4 --dp 1 --tp-3d 2,1,2 --recompute off --json");
  ASSERT_EQ(code, 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_TRUE(j[0]["valid"].get<bool>()) << j[0]["why_not"];
  EXPECT_EQ(j[0]["tp_3d"], nlohmann::json::array({2, 1, 2}));
  EXPECT_EQ(j[0]["micro_batch_size"], 2);  // global batch 4 over depth 2
  EXPECT_EQ(j[0]["micro_batches"], 1);
  EXPECT_GT(j[0]["time_s"]["tp_comm"].get<double>(), 0.0);
  const double busy = j[0]["time_s"]["compute"].get<double>() + j[0]["time_s"]["tp_comm"].get<double>() +
                      j[0]["time_s"]["optimizer"].get<double>();
  EXPECT_GE(j[0]["undisturbed_step_s"].get<double>(), 2.0 * busy * 0.999);  // 4 ranks on 2 cores: two turns
  const auto [bad_code, bad] = plan("--gpus 4 --dp 1 --tp-3d 2,2,2");
  EXPECT_EQ(bad_code, 1);
  EXPECT_NE(bad.find("dp (1) x pp (1) x tp (1) x tp_3d (2,2,2) = 8 != --gpus 4"), std::string::npos) << bad;
  const auto [grid_code, no_dp] = plan("--gpus 4 --tp-3d 2,1,2");
  EXPECT_EQ(grid_code, 1);
  EXPECT_NE(no_dp.find("--tp-3d R,C,D prices one layout: give --dp too"), std::string::npos) << no_dp;
  const auto [typo_code, typo] = plan("--gpus 4 --tp-3d yes");
  EXPECT_EQ(typo_code, 1);
  EXPECT_NE(typo.find("tp_3d must be \"R,C,D\""), std::string::npos) << typo;
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
  expect_error("--gpus 2 --global-batch 8 --bucket-mb 1e-9", "--bucket-mb must be between");
  expect_error("--gpus 2 --global-batch 8 --bucket-mb inf", "--bucket-mb");
}

}  // namespace
