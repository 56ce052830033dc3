// The planner's mixture-of-experts terms against hand-computed cases: total and active
// parameters, the experts a device holds under ep, the all-to-all bytes, and the search
// trying every ep that divides dp and the experts (its measured counterpart:
// tests/parallel/test_expert_parallel.cpp).
#include <gtest/gtest.h>

#include <map>
#include <string>

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

// The rows a rank's experts hold (B 2 sequences of T 8 tokens, all routed here: N = 16):
// without ep its own N K; under ep with capacity that drops, E B min(ceil(f K T / E), T) within
// the group's ep N K; dropless the balanced N K, or skewed every row it can be sent, each of the
// group's ep N tokens visiting min(K, E / ep) of its experts.
TEST(PlanMoe, ExpertRowsBalancedBoundedAndSkewed) {
  const int64_t B = 2, T = 8, N = B * T;
  EXPECT_EQ(expert_rows(B, T, T, 1, 4, 2, 0.0, true).rank, 2 * N);  // ep 1: a rank routes its own
  EXPECT_EQ(expert_rows(B, T, T, 2, 4, 2, 1.0).rank, 4 * B * 4);    // capacity ceil(2 * 8 / 4) = 4
  EXPECT_EQ(expert_rows(B, T, T, 2, 4, 2, 0.0).rank, 2 * N);
  const ExpertRows skewed = expert_rows(B, T, T, 2, 4, 2, 0.0, true);
  EXPECT_EQ(skewed.rank, 4 * N);        // min(E 4, ep K 4)
  EXPECT_EQ(skewed.one_expert, 2 * N);  // one row a token of the group
  EXPECT_EQ(expert_rows(B, T, T, 4, 4, 2, 0.0, true).rank, 4 * N);  // min(E 4, ep K 8): a token visits one of its experts
  EXPECT_EQ(expert_rows(B, T, T, 2, 8, 1, 0.0, true).rank, 2 * N);  // min(E 8, ep K 2)
  EXPECT_EQ(expert_rows(B, T, T, 2, 4, 2, 2.0, true).rank, 4 * N);  // f >= E / K never drops: dropless
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
  // Expert gradients all-reduced apart from ZeRO, once a step: this device's experts' (all 8
  // under ep 1 and DDP, 8 / 4 under ep 4 over expert_dp), none when ep = dp leaves each expert
  // on one rank, nor under ep 1 with ZeRO, which shards them with the rest.
  EXPECT_EQ(expert_gradient_bytes_per_step(m, l, 4), 0);
  EXPECT_TRUE(experts_sharded_by_zero(m, l));
  l.zero = 0;
  EXPECT_FALSE(experts_sharded_by_zero(m, l));
  EXPECT_EQ(expert_gradient_bytes_per_step(m, l, 4), 4 * 2 * 8 * (8 * 1024 * 1024 + 5 * 1024));
  l.zero = 1;
  l.ep = 4;
  EXPECT_FALSE(experts_sharded_by_zero(m, l));
  EXPECT_EQ(expert_gradient_bytes_per_step(m, l, 4), 4 * 2 * 2 * (8 * 1024 * 1024 + 5 * 1024));
  l.ep = 8;
  EXPECT_EQ(expert_gradient_bytes_per_step(m, l, 4), 0);
}

TEST(PlanMoe, SearchTriesEveryEpAndPricesItsExchanges) {
  const ModelSpec m = moe_model();
  const ClusterSpec c = cluster_preset("dgx-a100");
  bool saw_ep[9] = {};
  for (const LayoutCost& cost : search(m, c, 8, 64)) {
    if (!cost.valid) continue;
    saw_ep[cost.layout.ep] = true;
    if (cost.layout.ep > 1) {
      EXPECT_GT(cost.time.ep_comm_s, 0.0);
    } else {
      EXPECT_EQ(cost.time.ep_comm_s, 0.0);
    }
  }
  for (int ep : {1, 2, 4, 8}) EXPECT_TRUE(saw_ep[ep]) << "ep " << ep;
  // Each device holds E / ep experts: the state shrinks as ep grows. Under ZeRO-1 (mixed
  // precision) ep 1 shards all 4 x 8 experts' master weights and moments with the rest (4 + 12 / 8
  // bytes a value), ep 8 keeps its 4 x 1 whole (16).
  Layout l;
  l.dp = 8;
  l.micro_batch = 1;
  const LayoutCost one = predict(m, c, l, 64);
  l.ep = 8;
  const LayoutCost eight = predict(m, c, l, 64);
  ASSERT_TRUE(one.valid && eight.valid) << one.why_not << eight.why_not;
  const int64_t mlp = 8 * 1024 * 1024 + 5 * 1024;
  EXPECT_EQ(one.state_bytes - eight.state_bytes, (4 * 32 + 12 * 32 / 8 - 16 * 4) * mlp);
  EXPECT_EQ(one.expert_state_bytes, (4 * 32 + 12 * 32 / 8) * mlp);
  EXPECT_EQ(eight.expert_state_bytes, 16 * 4 * mlp);
  l.ep = 3;
  EXPECT_EQ(predict(m, c, l, 64).why_not.rfind("experts:", 0), 0u);
}

// In mixed precision (the GPU presets) Korthikanti's layer prices the dense blocks; a mixture of
// experts adds its routed rows' activations (K per token) over the dense MLP's, in 2-byte values,
// per MoE block, as Loom's bf16 count has them: the planner priced an MoE model's activations as
// the dense model's before.
TEST(PlanMoe, MixedPrecisionPricesTheRoutedRowsActivations) {
  ModelSpec dense = moe_model();
  dense.moe.experts = 0;
  const ModelSpec m = moe_model();
  const ClusterSpec c = cluster_preset("dgx-a100");
  Layout l;
  l.dp = 8;
  l.micro_batch = 2;
  l.recompute = false;
  const LayoutCost without = predict(dense, c, l, 64);
  const LayoutCost with = predict(m, c, l, 64);
  ASSERT_TRUE(without.valid && with.valid) << without.why_not << with.why_not;
  const int64_t per_block = moe_extra_activation_bytes_per_layer(2, m.seq, m.hidden, 1, false, 1, 8, 2, true);
  EXPECT_GT(per_block, 0);
  EXPECT_EQ(with.activation_bytes - without.activation_bytes, 4 * per_block);  // blocks 1, 3, 5, 7
  l.recompute = true;  // re-run in backward, one block at a time
  const LayoutCost recomputed = predict(m, c, l, 64), dense_recomputed = predict(dense, c, l, 64);
  EXPECT_EQ(recomputed.activation_bytes - dense_recomputed.activation_bytes, per_block);
}

// Where ranks share the experts out (ep, a grid plane that divides them) each exchange waits
// for the busiest rank: the experts' compute, K x 48 s h^2 per MoE layer, is priced at
// --moe-rank-imbalance times; the router's and the rest are not, and layouts whose ranks each
// run all the experts (ep 1, tp, a plane of 3 for 8 experts) wait for nobody.
TEST(PlanMoe, RankImbalanceScalesTheSharedOutExpertsComputeAlone) {
  ModelSpec m = moe_model();  // 8 layers, 4 of them MoE: h 1024, s 2048, 8 experts, top-2
  const double s = 2048, h = 1024, dense = m.flops_per_sequence(false);
  const double experts = 4.0 * 2.0 * 48.0 * s * h * h / dense;  // K expert MLPs per MoE layer
  const Layout ep2{.dp = 4, .micro_batch = 1, .ep = 2};
  const Layout alone{.dp = 4, .micro_batch = 1};
  const Layout plane4{.dp = 1, .micro_batch = 1, .row = 2, .col = 2, .depth = 1};
  const Layout plane3{.dp = 1, .micro_batch = 1, .row = 3, .col = 1, .depth = 1};
  std::map<std::string, double> balanced;
  for (const auto& [name, l] : {std::pair{"ep2", ep2}, {"alone", alone}, {"plane4", plane4}, {"plane3", plane3}})
    balanced[name] = moe_compute_ratio(m, l);
  m.moe.rank_imbalance = 1.3;
  EXPECT_NEAR(moe_compute_ratio(m, ep2) - balanced["ep2"], 0.3 * experts, 1e-12);
  EXPECT_NEAR(moe_compute_ratio(m, plane4) - balanced["plane4"], 0.3 * experts, 1e-12);
  EXPECT_DOUBLE_EQ(moe_compute_ratio(m, alone), balanced["alone"]);
  EXPECT_DOUBLE_EQ(moe_compute_ratio(m, plane3), balanced["plane3"]);  // 3 does not divide 8: all run all
  // The step prices it: ep 2's compute grows by that share of the dense step's compute.
  const ClusterSpec c = cluster_preset("dgx-a100");
  ModelSpec level = m;
  level.moe.rank_imbalance = 1.0;
  const LayoutCost waited = predict(m, c, ep2, 64), even = predict(level, c, ep2, 64);
  ASSERT_TRUE(waited.valid && even.valid) << waited.why_not << even.why_not;
  EXPECT_NEAR(waited.time.compute_s / even.time.compute_s, moe_compute_ratio(m, ep2) / balanced["ep2"], 1e-9);
  EXPECT_EQ(waited.state_bytes, even.state_bytes);  // memory is priced apart (capacity's bound)
}

// Under tp, sequence parallelism decides what an MoE block costs a device: with it each tp
// rank routes its own tokens (the dense split of the work) and sums the router's and its
// experts' gradients over tp; without it every tp rank runs every token's experts. Either way
// the block's MLP moves no tp activations.
TEST(PlanMoe, TensorParallelismPricesTheExpertsBySequenceParallelism) {
  const ModelSpec m = moe_model();  // 8 layers, 4 of them MoE: h 1024, s 2048, 8 experts, top-2
  Layout l;
  l.dp = 4;
  l.tp = 2;
  l.micro_batch = 1;
  l.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(moe_compute_ratio(m, l), moe_flops_ratio(m));
  l.sequence_parallel = false;
  const double s = 2048, h = 1024, dense = m.flops_per_sequence(false);
  // 4 layers x ((K t - 1) MLPs of 48 s h^2 and t routers of 6 s h E) beyond the dense model's.
  EXPECT_DOUBLE_EQ(moe_compute_ratio(m, l), 1.0 + 4.0 * ((2.0 * 2.0 - 1.0) * 48.0 * s * h * h + 2.0 * 6.0 * s * h * 8.0) / dense);
  EXPECT_DOUBLE_EQ(moe_layer_collective_share(m), 0.75);
  // Gradient sums: none without sequence parallelism; once a step, or per micro-batch under
  // ZeRO-2 (the experts once under ep, which keeps them out of ZeRO).
  EXPECT_EQ(moe_replicated_gradient_bytes(m, l, 3), 0);
  l.sequence_parallel = true;
  const int64_t router = 4 * 1024 * 8, expert = 8 * 1024 * 1024 + 5 * 1024;
  EXPECT_EQ(moe_replicated_gradient_bytes(m, l, 3), 4 * (router + 4 * 8 * expert));
  l.zero = 2;
  EXPECT_EQ(moe_replicated_gradient_bytes(m, l, 3), 4 * 3 * (router + 4 * 8 * expert));
  l.ep = 2;
  EXPECT_EQ(moe_replicated_gradient_bytes(m, l, 3), 4 * (3 * router + 4 * 4 * expert));
  l.ep = 1;
  l.zero = 1;
  // The step: the layers' tp collectives lose the MoE blocks' MLP share, the sums add theirs.
  const ClusterSpec c = cluster_preset("dgx-a100");
  ModelSpec dense_model = m;
  dense_model.moe.experts = 0;
  for (const bool sp : {false, true}) {
    l.sequence_parallel = sp;
    const LayerTime lt = layer_time(m, c, l);
    const double layer_tp = (l.recompute ? 2.0 : 1.0) * lt.forward_tp + lt.backward_tp;
    const StepTime moe = step_time(m, c, l, 3, 0), plain = step_time(dense_model, c, l, 3, 0);
    const double without_mlp = plain.tp_comm_s - 3.0 * 8.0 * layer_tp * 0.25;
    if (sp)
      EXPECT_GT(moe.tp_comm_s, without_mlp) << "the experts' gradient sums over tp";
    else
      EXPECT_NEAR(moe.tp_comm_s, without_mlp, 1e-12 * plain.tp_comm_s);
  }
}

// The experts' gradients are reduced over expert_dp (the dp / ep ranks holding the same
// experts) beside the dense ones over dp, under DDP and every ZeRO stage (ZeRO leaves the
// experts of ep > 1 out: DDP reduces them, ZeRO-3 included): with ep 2 of dp 8 the step's
// data-parallel communication grows by at least one all-reduce of this device's expert
// weights over 4 ranks; with ep 8 no rank shares its experts and nothing more moves. Adam
// steps the experts a device holds too. (The bytes against a real step's counters:
// tests/parallel/test_expert_parallel.cpp.)
TEST(PlanMoe, ExpertGradientsAreReducedOverExpertDataParallelism) {
  const ModelSpec m = moe_model();
  const ClusterSpec c = cluster_preset("dgx-a100");
  auto data_parallel = [](const StepTime& t) { return t.dp_comm_s + t.overlapped_comm_s; };
  for (const int zero : {0, 1, 2, 3}) {
    Layout l;
    l.dp = 8;
    l.zero = zero;
    l.recompute = false;
    l.sequence_parallel = false;
    const int64_t params = m.parameters();
    l.ep = 8;
    const StepTime alone = step_time(m, c, l, 2, params);
    l.ep = 2;
    const StepTime shared = step_time(m, c, l, 2, params);
    const double experts = static_cast<double>(expert_parameters_per_device(m, l) * 2);  // bf16 gradients
    EXPECT_GE(data_parallel(shared) - data_parallel(alone), 0.999 * hierarchical_all_reduce_seconds(experts, 4, 4, c))
        << "zero " << zero;
    EXPECT_GT(shared.optimizer_s, alone.optimizer_s) << "zero " << zero;  // 4 of the experts here, 1 with ep 8
  }
}

// Under ZeRO-3 the experts' all-reduce runs beside the dense reduce-scatters and gathers: when
// backward cannot hide it (over a pipeline's interleaved chunks the experts reduce after its
// last backward, while ZeRO-3's dense shards reduce in every backward), it is exposed.
TEST(PlanMoe, ZeroThreeExposesTheExpertReductionBackwardCannotHide) {
  const ModelSpec m = moe_model();
  const ClusterSpec c = cluster_preset("dgx-a100");
  Layout l;
  l.dp = 8;
  l.pp = 2;
  l.chunks = 2;
  l.zero = 3;
  l.recompute = false;
  l.sequence_parallel = false;
  const int64_t params = m.parameters() / 2;
  l.ep = 8;
  const StepTime alone = step_time(m, c, l, 4, params);
  l.ep = 2;
  const StepTime shared = step_time(m, c, l, 4, params);
  const double experts = static_cast<double>(expert_parameters_per_device(m, l) * 2);
  EXPECT_GE(shared.dp_comm_s - alone.dp_comm_s, 0.999 * hierarchical_all_reduce_seconds(experts, 4, 4, c));
}

// Without ep the experts are parameters like the rest: ZeRO 1-3 reduce-scatter their gradients
// and gather them with the dense ones (no all-reduce over dp of their own) and Adam steps a
// dp-th of them, as for a dense model holding the experts' parameters besides its own. (The
// bytes against a real step's counters: tests/parallel/test_expert_parallel.cpp.)
TEST(PlanMoe, WithoutEpZeroPricesTheExpertsAsShardedParameters) {
  const ModelSpec m = moe_model();
  ModelSpec dense = m;
  dense.moe.experts = 0;
  const ClusterSpec c = cluster_preset("dgx-a100");
  for (const int zero : {1, 2, 3}) {
    Layout l;
    l.dp = 8;
    l.zero = zero;
    l.recompute = false;
    l.sequence_parallel = false;
    const int64_t params = dense_parameters_per_device(m, l), experts = expert_parameters_per_device(m, l);
    const StepTime moe = step_time(m, c, l, 2, params), plain = step_time(dense, c, l, 2, params + experts);
    EXPECT_DOUBLE_EQ(moe.dp_comm_s, plain.dp_comm_s) << "zero " << zero;
    EXPECT_DOUBLE_EQ(moe.overlapped_comm_s, plain.overlapped_comm_s) << "zero " << zero;
    EXPECT_DOUBLE_EQ(moe.optimizer_s, plain.optimizer_s) << "zero " << zero;
    const ZeroBytes bytes = zero_bytes_per_step(m, l, 2, params, 2, 2);
    EXPECT_EQ(bytes.reduced, (zero == 1 ? 1 : 2) * 2 * (params + experts)) << "zero " << zero;
    // Under ep the experts stay out: ZeRO moves the dense parameters only.
    l.ep = 2;
    EXPECT_EQ(zero_bytes_per_step(m, l, 2, params, 2, 2).reduced, (zero == 1 ? 1 : 2) * 2 * params) << "zero " << zero;
  }
}

}  // namespace
}  // namespace loom::plan
