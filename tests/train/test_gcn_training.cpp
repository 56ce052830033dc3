// The GCN through the trainer: a run resumed from a checkpoint is bit-identical to the
// uninterrupted run (dropout masks keyed by seed and step, Adam's state restored), a resume on
// another graph or GCN width is refused by name, and a parallel layout is refused. A tiny
// R-MAT graph keeps each case under a second.
#include <gtest/gtest.h>

#include <filesystem>

#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "loom/tensor/memory_tracker.hpp"
#include "loom/train/gcn_spec.hpp"
#include "loom/train/trainer.hpp"
#include "run_command.hpp"
#include "test_util.hpp"
#include "train/tiny_run.hpp"

namespace loom::train {
namespace {

TrainConfig tiny_gcn(const std::string& name) {
  TrainConfig c;
  c.family = "gcn";
  c.data = "rmat:scale=7,edge_factor=4,features=16,classes=3,seed=2";
  c.gcn.hidden = 8;
  c.gcn.dropout = 0.5;
  c.steps = 6;
  c.lr = 0.01;
  c.min_lr = 0.01;
  c.warmup_steps = 0;
  c.weight_decay = 5e-4;
  c.grad_clip = 0.0;
  c.threads = 1;
  c.peak_gflops = 100;
  c.log_every = 100;
  c.eval_every = 0;
  c.out_dir = (std::filesystem::temp_directory_path() / ("loom_gcn_" + name)).string();
  std::filesystem::remove_all(c.out_dir);
  return c;
}

TEST(GcnTraining, ResumeIsBitExact) {
  std::map<std::string, Tensor> straight;
  std::vector<float> straight_losses;
  {
    Trainer t(tiny_gcn("straight"), true);
    straight_losses = losses_of(t, 6);
    straight = t.state_dict();
  }
  TrainConfig first = tiny_gcn("resumed");
  {
    Trainer t(first, true);
    losses_of(t, 3);
    t.save_checkpoint_now();
  }
  TrainConfig second = first;
  second.resume = "latest";
  Trainer t(second, true);
  ASSERT_EQ(t.step(), 3);
  const std::vector<float> rest = losses_of(t, 6);
  EXPECT_EQ(rest, std::vector<float>(straight_losses.begin() + 3, straight_losses.end()));
  for (const auto& [key, value] : t.state_dict())
    EXPECT_TRUE(testing::all_close(value.f32(), straight.at(key).f32(), value.numel(), 0.0, 0.0, key));
  // Dropout is on: the losses differ from step to step and from a run without it.
  TrainConfig no_dropout = tiny_gcn("no_dropout");
  no_dropout.gcn.dropout = 0.0;
  Trainer plain(no_dropout, true);
  EXPECT_NE(losses_of(plain, 2)[1], straight_losses[1]);

  // Another graph or another width: named, nothing trained.
  TrainConfig other = second;
  other.data = "rmat:scale=7,edge_factor=4,features=16,classes=3,seed=3";
  const std::string message = testing::error_of([&] { Trainer(other, true); });
  EXPECT_NE(message.find("holds a different model: data graph:128 nodes"), std::string::npos) << message;
  other = second;
  other.gcn.hidden = 4;
  EXPECT_NE(testing::error_of([&] { Trainer(other, true); }).find("gcn_hidden 8 (checkpoint) vs 4 (config)"),
            std::string::npos);
}

TEST(GcnTraining, ParallelLayoutsAreRefused) {
  TrainConfig c = tiny_gcn("parallel");
  c.dp = 2;
  EXPECT_EQ(testing::error_of([&] { make_model_spec(c); }),
            "the gcn model trains on the whole graph, one batch a step: dp (2) and zero (0) have no batch to split (one "
            "graph); set dp = 1 and zero = 0 and spread the graph over ranks with tp_3d = \"R,C,D\"");
  c = tiny_gcn("pipeline");
  c.pp = 2;
  EXPECT_EQ(testing::error_of([&] { make_model_spec(c); }),
            "the gcn model trains on one rank or on a 3D grid (tp_3d = \"R,C,D\"): pp (2) and tp (1) are GPT layouts; set "
            "both to 1");
  c = tiny_gcn("micro");
  c.micro_batches = 2;
  EXPECT_EQ(testing::error_of([&] { make_model_spec(c); }),
            "the gcn model trains on the whole graph in one batch: micro_batches must be 1, got 2");
}

// configs/cora.toml on the bundled Cora, one thread, no files.
TrainConfig cora_config() {
  TrainConfig c;
  apply_toml_file(c, LOOM_SOURCE_DIR "/configs/cora.toml");
  c.data = LOOM_SOURCE_DIR "/data/cora";
  c.threads = 1;
  c.peak_gflops = 100;
  c.eval_every = 0;
  c.out_dir = "";
  return c;
}

// configs/cora.toml (the paper's hyperparameters, 200 epochs) over seeds 1-10, as
// bench/gcn_cora_accuracy.sh runs them: the bar, a mean test accuracy of at least 80%
// (the paper reports 81.5% on its split). Measured: 80.95% with a spread (std) of 0.96%
// (79.6-82.4%), so the mean of ten sits three of its own standard errors above the bar; a
// GCN without the normalisation or the graph stays far below.
TEST(GcnTraining, CoraReachesThePapersAccuracyOverTenSeeds) {
  double sum = 0.0;
  const int64_t seeds = 10;
  for (int64_t seed = 1; seed <= seeds; ++seed) {
    TrainConfig c = cora_config();
    c.seed = seed;
    Trainer t(c, true);
    t.run();
    t.evaluate_test();
    const std::vector<Metric> m = t.spec().last_metrics();
    ASSERT_EQ(m.size(), 1u);
    EXPECT_EQ(m[0].name, "test_acc");
    sum += m[0].value;
  }
  EXPECT_GE(sum / static_cast<double>(seeds), 0.80);
}

// configs/cora.toml under bf16 mixed precision against fp32: the final validation loss within
// 0.03 nats and the test accuracy within 2 points (measured: 2e-4 nats and 0.1 points apart;
// the first layer's sparse product stays fp32, the second layer's GEMMs run in bf16). The
// parameters take what the mixed-precision formula says: 2 bytes more for each weight a GEMM
// reads (its bf16 copy, made once a step), none for the first layer's weight, which only the
// sparse product reads. Converting in every GEMM call left no copy at all (90 KiB against a
// formula of 135 KiB: the formula counted copies of both weights).
TEST(GcnTraining, Bf16TracksFp32OnCoraWithTheFormulasWeightCopies) {
  std::map<std::string, std::pair<float, double>> result;  // precision -> (val loss, test accuracy)
  for (const std::string precision : {"fp32", "bf16"}) {
    TrainConfig c = cora_config();
    c.precision = precision;
    MemoryTracker& m = MemoryTracker::instance();
    const int64_t params0 = m.current(MemoryCategory::Parameters);
    Trainer t(c, true);
    t.run();
    EXPECT_EQ(m.current(MemoryCategory::Parameters) - params0, t.state_formula().params) << precision;
    const float val = t.evaluate();
    t.evaluate_test();
    result[precision] = {val, t.spec().last_metrics().at(0).value};
  }
  EXPECT_NEAR(result["bf16"].first, result["fp32"].first, 0.03) << "validation loss";
  EXPECT_NEAR(result["bf16"].second, result["fp32"].second, 0.02) << "test accuracy";
}

// The memory check's model state before the model exists, serially: every weight's bf16 copy but
// a first layer's that multiplies sparse features (Cora's, 1.3% non-zero: read in fp32 by the
// sparse product), no copy of a bias. It once gave every parameter a copy (at most).
TEST(GcnTraining, SerialStatePredictionEqualsTheTrackerSparseAndDenseFeatures) {
  MemoryTracker& m = MemoryTracker::instance();
  const auto state_now = [&] {
    return m.current(MemoryCategory::Parameters) + m.current(MemoryCategory::Gradients) +
           m.current(MemoryCategory::OptimizerState);
  };
  for (const bool sparse : {true, false})
    for (const std::string precision : {"fp32", "bf16"}) {
      SCOPED_TRACE(std::string(sparse ? "cora" : "rmat") + " " + precision);
      TrainConfig c = sparse ? cora_config() : tiny_gcn("state");
      c.out_dir = "";
      c.precision = precision;
      const int64_t state0 = state_now();
      Trainer t(c, true);
      auto& spec = dynamic_cast<GcnSpec&>(t.spec());
      EXPECT_EQ(spec.features_multiplied_sparse(), sparse);
      const double predicted = spec.memory_need().state;
      t.train_step();  // the gradients, the moments and the bf16 copies exist
      EXPECT_EQ(static_cast<double>(state_now() - state0), predicted);
    }
}

TEST(GcnTraining, ABadGraphFileEndsTheRunNamingFileAndLine) {
  const std::filesystem::path dir = testing::fresh_temp_dir("loom_gcn_cli");
  std::ofstream(dir / "g.features") << "1 0\n0 1\n";
  std::ofstream(dir / "g.labels") << "0 train\n1 val\n";
  std::ofstream(dir / "g.edges") << "0 1\n1 5\n";
  const testing::CommandResult r = testing::run_loom("train --model gcn --data " + (dir / "g").string() +
                                                     " --threads 1 --out-dir " + (dir / "run").string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find((dir / "g").string() + ".edges:2: node 5 is out of range: the graph has 2 nodes (0..1)"),
            std::string::npos)
      << r.output;
  std::filesystem::remove_all(dir);
}

// memory.json records a GCN's graph data, predicted as the memory check counts it and held, in
// the same record a GPT's run writes (whose input data the model does not hold: 0 and 0).
TEST(GcnTraining, MemoryJsonRecordsTheGraphDataPredictedAndHeld) {
  TrainConfig c = tiny_gcn("memory_json");
  c.steps = 1;
  Trainer t(c, true);
  t.run();
  const auto file = nlohmann::json::parse(testing::read_file(std::filesystem::path(c.out_dir) / "memory.json"));
  const nlohmann::json& record = file.at("ranks").at(0);
  const auto& spec = dynamic_cast<const GcnSpec&>(t.spec());
  EXPECT_GT(spec.data_held().total(), 0);
  EXPECT_EQ(record.at("formula").at("data").get<int64_t>(), spec.data_need().total());
  EXPECT_EQ(record.at("data_held").get<int64_t>(), spec.data_held().total());
  EXPECT_EQ(spec.data_need().total(), spec.data_held().total());  // serially exact
  for (const char* key : {"params", "grads", "optimizer", "activations"}) EXPECT_TRUE(record.at("formula").contains(key));

  const TrainConfig g = tiny_run("memory_json_gpt");
  const nlohmann::json gpt_record = Trainer(g, true).memory_json();
  EXPECT_EQ(gpt_record.at("formula").at("data").get<int64_t>(), 0);
  EXPECT_EQ(gpt_record.at("data_held").get<int64_t>(), 0);
  std::filesystem::remove_all(c.out_dir);
  std::filesystem::remove_all(g.out_dir);
}

}  // namespace
}  // namespace loom::train
