// An evaluation between steps must leave training as it was, bit for bit: its forwards run
// the same hooks (ZeRO-3's gathers, pipeline sends, ring attention, dropout's masks keyed by
// step, a router's capacity) with no backward after them. ZeRO-3 once left each chunk's root
// unit gathered after one (and every unit when keeping them for the step); anything an
// evaluation shifts (a gathered copy, a mask counter, a pipeline's message order) shows here
// as a different loss or parameter.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "comm/mpi_test_env.hpp"
#include "loom/train/trainer.hpp"
#include "parallel/equivalence.hpp"

namespace loom::parallel {
namespace {

using loom::testing::world;
using loom::testing::equivalence::tiny;

struct EvalCase {
  std::string name;
  int64_t ranks;
  std::function<void(train::TrainConfig&)> layout;
};

// The losses and the final parameters (gathered to the serial layout) of three steps, with or
// without an evaluation after each.
std::pair<std::vector<float>, std::vector<std::vector<float>>> train_three_steps(const train::TrainConfig& c,
                                                                                   bool evaluate) {
  train::Trainer t(c, true, &world());
  std::vector<float> losses;
  while (t.step() < c.steps) {
    losses.push_back(t.train_step().loss);
    if (evaluate) {
      EXPECT_TRUE(std::isfinite(t.evaluate()));
    }
  }
  std::vector<std::vector<float>> params;
  for (auto& [name, value] : t.state_dict())
    if (name.rfind("model.", 0) == 0) params.emplace_back(value.f32(), value.f32() + value.numel());
  return {losses, params};
}

TEST(EvaluationBetweenSteps, LeavesTrainingBitIdentical) {
  const int64_t p = world().size();
  const std::vector<EvalCase> cases = {
      {"dp2_zero3_kept_for_the_step", 2,
       [](train::TrainConfig& c) {
         c.dp = 2, c.zero = 3, c.zero3_reshard = "step", c.micro_batches = 2;
       }},
      {"tp2_sp_dropout", 2,
       [](train::TrainConfig& c) {
         c.tp = 2, c.sequence_parallel = true, c.model.hidden_dropout = 0.1, c.model.attention_dropout = 0.1;
       }},
      {"cp2_bf16", 2, [](train::TrainConfig& c) { c.cp = 2, c.precision = "bf16"; }},
      {"dp2_ep2_capacity", 2,
       [](train::TrainConfig& c) {
         c.dp = 2, c.ep = 2, c.model.moe.experts = 4, c.model.moe.capacity_factor = 1.25;
       }},
      {"grid_1_2_1", 2, [](train::TrainConfig& c) { c.tp_3d = "1,2,1"; }},
      {"dp2_pp2_interleaved_zero3_bf16_dropout", 4,
       [](train::TrainConfig& c) {
         c.dp = 2, c.pp = 2, c.schedule = "interleaved", c.chunks = 2, c.zero = 3, c.micro_batches = 2;
         c.precision = "bf16", c.model.hidden_dropout = 0.1, c.model.n_layer = 4;
       }},
      {"dp2_pp2_gpipe_zero3_kept_for_the_step", 4,
       [](train::TrainConfig& c) {
         c.dp = 2, c.pp = 2, c.schedule = "gpipe", c.zero = 3, c.zero3_reshard = "step", c.micro_batches = 2;
       }},
  };
  int run = 0;
  for (const EvalCase& e : cases) {
    if (e.ranks != p) continue;
    train::TrainConfig c = tiny(1, 2, 1);
    c.steps = 3;
    c.eval_batches = 1;
    e.layout(c);
    const auto without = train_three_steps(c, false);
    const auto with = train_three_steps(c, true);
    ASSERT_EQ(without.first.size(), 3u) << e.name;
    EXPECT_EQ(without.first, with.first) << e.name << ": the losses moved";
    EXPECT_EQ(without.second, with.second) << e.name << ": the parameters moved";
    ++run;
  }
  if (run == 0) GTEST_SKIP() << "layouts of 2 and 4 ranks";
}

}  // namespace
}  // namespace loom::parallel
