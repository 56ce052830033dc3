// The ZeRO memory formulas (16Ψ, 8Ψ + 8Ψ/N, 4Ψ + 12Ψ/N, 16Ψ/N), per stage, and the tracker agreeing with them for
// a real model and optimizer.
#include <gtest/gtest.h>

#include "loom/plan/memory_model.hpp"
#include "loom/train/trainer.hpp"
#include "tiny_config.hpp"

namespace loom::plan {
namespace {

TEST(MemoryModel, ZeroStagesMatchTheFormulas) {
  const int64_t P = 1000, N = 4;
  EXPECT_EQ(model_state_bytes(P, N, 0, 8).total(), 16 * P);               // DDP: 16P
  EXPECT_EQ(model_state_bytes(P, N, 1, 8).total(), 8 * P + 8 * P / N);    // ZeRO-1
  EXPECT_EQ(model_state_bytes(P, N, 2, 8).total(), 4 * P + 12 * P / N);   // ZeRO-2
  EXPECT_EQ(model_state_bytes(P, N, 3, 8).total(), 16 * P / N);           // ZeRO-3
  EXPECT_EQ(model_state_bytes(P, 1, 3, 8).total(), 16 * P);               // one rank: nothing to shard
  EXPECT_EQ(model_state_bytes(P, N, 0, 4).optimizer, 4 * P);              // SGD momentum
}

TEST(MemoryModel, TrackerMeasuresTheFormulaForTheSerialTrainer) {
  MemoryTracker& m = MemoryTracker::instance();
  const int64_t params0 = m.current(MemoryCategory::Parameters), grads0 = m.current(MemoryCategory::Gradients),
                optim0 = m.current(MemoryCategory::OptimizerState);
  train::TrainConfig c = testing::tiny_config();
  c.model.n_embd = 32;
  train::Trainer t(c, true);
  const StateBytes want = model_state_bytes(t.model().num_parameters(), 1, 0, 8);
  EXPECT_EQ(m.current(MemoryCategory::Parameters) - params0, want.params);
  EXPECT_EQ(m.current(MemoryCategory::Gradients) - grads0, want.grads);
  EXPECT_EQ(m.current(MemoryCategory::OptimizerState) - optim0, want.optimizer);
  EXPECT_NE(t.memory_report().find("(formula " + format_bytes(want.optimizer) + ")"), std::string::npos)
      << t.memory_report();
}

}  // namespace
}  // namespace loom::plan
