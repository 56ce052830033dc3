// The planner's mixture-of-experts terms against hand-computed cases: total and active
// parameters, the experts a device holds under ep, the all-to-all bytes, and the search
// trying every ep that divides dp and the experts (its measured counterpart:
// tests/parallel/test_expert_parallel.cpp).
#include <gtest/gtest.h>

#include "loom/plan/layout_cost.hpp"
#include "loom/plan/moe_cost.hpp"

namespace loom::plan {
namespace {

ModelSpec moe_model() {
  ModelSpec m{"moe", 8, 1024, 16, 2048, 51200};
  m.moe = {.experts = 8, .top_k = 2, .every = 2};
  return m;
}

TEST(PlanMoe, TotalAndActiveParameters) {
  const ModelSpec m = moe_model();
  const int64_t mlp = 8 * 1024 * 1024 + 5 * 1024, router = 1024 * 8;
  EXPECT_EQ(moe_layers(m), 4);
  EXPECT_EQ(total_parameters(m), m.parameters() + 4 * (7 * mlp + router));
  EXPECT_EQ(active_parameters(m), m.parameters() + 4 * (1 * mlp + router));
  ModelSpec dense = m;
  dense.moe.experts = 0;
  EXPECT_EQ(total_parameters(dense), dense.parameters());
  EXPECT_EQ(moe_flops_ratio(dense), 1.0);
  EXPECT_GT(moe_flops_ratio(m), 1.0);
}

TEST(PlanMoe, ExpertsPerDeviceAndAllToAllBytes) {
  const ModelSpec m = moe_model();
  Layout l;
  l.dp = 8;
  l.ep = 4;
  l.pp = 2;
  l.micro_batch = 2;
  // 4 MoE layers over 2 stages, 8 / 4 experts each.
  EXPECT_EQ(expert_parameters_per_device(m, l), 2 * 2 * (8 * 1024 * 1024 + 5 * 1024));
  // 4 exchanges x (2 x 2048 x top-2 rows of 1024 values of 2 bytes) x 2 layers x 3 micro-batches.
  EXPECT_EQ(all_to_all_bytes_per_step(m, l, 3, 2), int64_t{4} * 2 * 2048 * 2 * 1024 * 2 * 2 * 3);
  l.ep = 1;
  EXPECT_EQ(all_to_all_bytes_per_step(m, l, 3, 2), 0);
}

TEST(PlanMoe, SearchTriesEveryEpAndPricesItsExchanges) {
  const ModelSpec m = moe_model();
  const ClusterSpec c = cluster_preset("dgx-a100");
  bool saw_ep[9] = {};
  for (const LayoutCost& cost : search(m, c, 8, 64)) {
    if (cost.valid) saw_ep[cost.layout.ep] = true;
    if (cost.valid && cost.layout.ep > 1) EXPECT_GT(cost.time.ep_comm_s, 0.0);
    if (cost.valid && cost.layout.ep == 1) EXPECT_EQ(cost.time.ep_comm_s, 0.0);
  }
  for (int ep : {1, 2, 4, 8}) EXPECT_TRUE(saw_ep[ep]) << "ep " << ep;
  // Each device holds E / ep experts: the state shrinks as ep grows.
  Layout l;
  l.dp = 8;
  l.micro_batch = 1;
  const LayoutCost one = predict(m, c, l, 64);
  l.ep = 8;
  const LayoutCost eight = predict(m, c, l, 64);
  ASSERT_TRUE(one.valid && eight.valid) << one.why_not << eight.why_not;
  EXPECT_EQ(one.state_bytes - eight.state_bytes, int64_t{16} * 4 * 7 * (8 * 1024 * 1024 + 5 * 1024));
  l.ep = 3;
  EXPECT_EQ(predict(m, c, l, 64).why_not.rfind("experts:", 0), 0u);
}

}  // namespace
}  // namespace loom::plan
