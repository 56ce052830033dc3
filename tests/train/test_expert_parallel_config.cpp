// The mixture-of-experts keys through the schema (flags and TOML) and the layouts expert
// parallelism refuses by name: each refusal is asserted once.
#include <gtest/gtest.h>

#include "loom/train/config.hpp"
#include "test_util.hpp"
#include "tiny_config.hpp"

namespace loom::train::expert_parallel_config_test {
namespace {

using loom::testing::error_of;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(ExpertParallelConfig, MoeKeysReadFromTomlAndFlags) {
  TrainConfig c;
  apply_toml_string(c, "[model]\nmoe_experts = 8\nmoe_top_k = 1\nmoe_capacity_factor = 1.25\nmoe_every = 2\n"
                       "moe_aux_loss_coef = 0.02\n[parallel]\nep = 2\n", "test.toml");
  EXPECT_EQ(c.model.moe.experts, 8);
  EXPECT_EQ(c.model.moe.top_k, 1);
  EXPECT_EQ(c.model.moe.capacity_factor, 1.25);
  EXPECT_EQ(c.model.moe.every, 2);
  EXPECT_EQ(c.model.moe.aux_loss_coef, 0.02);
  EXPECT_EQ(c.ep, 2);
  for (const ConfigKey& k : config_schema(c)) {
    if (k.key == "moe_experts") {
      EXPECT_EQ(flag_name(k.key), "moe-experts");
    }
  }
  EXPECT_TRUE(contains(error_of([&] { apply_toml_string(c, "[model]\nmoe_expert = 4\n", "t.toml"); }),
                       "did you mean 'moe_experts'"));
}

TEST(ExpertParallelConfig, ComposesWithZeroTpPpRefusesCpAndWhatCannotDivide) {
  auto refusal = [](auto change) {
    TrainConfig c = loom::testing::tiny_config();
    c.model.moe.experts = 4;
    c.dp = 2;
    c.ep = 2;
    change(c);
    return error_of([&] { c.validate(); });
  };
  EXPECT_EQ(refusal([](TrainConfig&) {}), "(no error)");
  EXPECT_TRUE(contains(refusal([](TrainConfig& c) { c.model.moe.experts = 0; }), "set moe_experts"));
  EXPECT_TRUE(contains(refusal([](TrainConfig& c) { c.model.moe.experts = 6; c.ep = 4; c.dp = 4; }),
                       "moe_experts (6) must be divisible by ep (4)"));
  EXPECT_TRUE(contains(refusal([](TrainConfig& c) { c.dp = 3; }), "it must divide dp (3)"));
  for (int64_t zero : {1, 2, 3}) {
    EXPECT_EQ(refusal([zero](TrainConfig& c) { c.zero = zero; }), "(no error)");
    // bf16 with ZeRO: the router's weight is gathered in fp32, the other parameters in bf16
    EXPECT_EQ(refusal([zero](TrainConfig& c) { c.zero = zero; c.precision = "bf16"; }), "(no error)");
    EXPECT_EQ(refusal([zero](TrainConfig& c) { c.zero = zero; c.precision = "bf16"; c.ep = 1; }), "(no error)");
  }
  EXPECT_EQ(refusal([](TrainConfig& c) { c.precision = "bf16"; }), "(no error)");
  EXPECT_EQ(refusal([](TrainConfig& c) { c.tp = 2; }), "(no error)");
  EXPECT_EQ(refusal([](TrainConfig& c) { c.pp = 2; c.model.n_layer = 2; }), "(no error)");
  EXPECT_EQ(refusal([](TrainConfig& c) { c.cp = 2; }), "(no error)");
  EXPECT_EQ(refusal([](TrainConfig& c) { c.cp = 2; c.model.moe.capacity_factor = 1.0; }), "(no error)");
  EXPECT_EQ(refusal([](TrainConfig& c) { c.ep = 1; c.tp = 2; c.sequence_parallel = true; }), "(no error)");
  EXPECT_EQ(refusal([](TrainConfig& c) {
              c.ep = 1;
              c.tp = 2;
              c.sequence_parallel = true;
              c.model.moe.capacity_factor = 1.25;
            }),
            "(no error)");
}

}  // namespace
}  // namespace loom::train::expert_parallel_config_test
