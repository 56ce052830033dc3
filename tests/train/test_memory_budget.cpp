// The memory check that runs before a model is built: its prediction is the planner's (what
// `loom train --dry-run` prints), absurd sizes are counted without overflow, and a model
// larger than the machine is refused naming both numbers.
#include <gtest/gtest.h>

#include "loom/plan/memory_model.hpp"
#include "loom/train/memory_budget.hpp"
#include "test_util.hpp"

namespace {

using namespace loom::train;

TEST(MemoryBudget, StateIsThePlannersFormula) {
  TrainConfig c;
  c.dp = 4;
  c.zero = 3;
  const MemoryNeed need = training_memory(c);
  const loom::plan::StateBytes state = loom::plan::model_state_bytes(c.model.num_parameters(), 4, 3, 8);
  EXPECT_EQ(need.state, static_cast<double>(state.total()));
  EXPECT_GT(need.activations, 0.0);
  c.model.recompute = true;
  EXPECT_LT(training_memory(c).activations, need.activations) << "recompute keeps only each block's input";
  EXPECT_EQ(inference_memory(c.model).state, 4.0 * static_cast<double>(c.model.num_parameters()));
}

TEST(MemoryBudget, AbsurdSizesAreCountedWithoutOverflowAndRefused) {
  TrainConfig c;
  c.model.n_embd = 2000000000;
  c.model.n_head = 1;
  c.model.n_layer = 1000000;
  const MemoryNeed need = training_memory(c);
  EXPECT_GT(need.total(), 1e26);  // 16 bytes x 12 x 10^6 layers x (2 x 10^9)^2
  EXPECT_EQ(describe(need).rfind("more than 1 EiB (state more than 1 EiB", 0), 0u) << describe(need);
  const std::string error = loom::testing::error_of([&] { check_fits_in_memory(need, 2, "the model"); });
  EXPECT_EQ(error.rfind("the model needs more than 1 EiB", 0), 0u) << error;
  EXPECT_NE(error.find(" per rank x 2 ranks on this host, as `loom train --dry-run` predicts, more than the "),
            std::string::npos)
      << error;
  EXPECT_NE(error.find(" this machine has available ("), std::string::npos) << error;
  EXPECT_GT(available_memory().bytes, 0);
  EXPECT_EQ(loom::testing::error_of([] { check_fits_in_memory({1024.0, 0.0}, 1, "a small model"); }), "(no error)");
}

}  // namespace
