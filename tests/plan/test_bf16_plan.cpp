// Mixed precision in the planner (`loom plan --precision bf16`): the model-state formulas of
// each ZeRO stage (plan/mixed_precision_cost.hpp) against the published ones, a layout priced
// by hand, the prediction against the memory tracker's peak over a bf16 training step, the
// activation traffic priced at 2 bytes a value, and the dgx-a100 preset's precision.
#include <gtest/gtest.h>

#include <array>

#include "loom/plan/layout_cost.hpp"
#include "loom/plan/mixed_precision_cost.hpp"
#include "loom/plan/rank_memory_terms.hpp"
#include "loom/plan/tensor_parallel_3d_memory.hpp"
#include "loom/plan/tensor_parallel_3d_cost.hpp"
#include "loom/kernels/attention.hpp"
#include "loom/kernels/attention_bf16.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/train/memory_budget.hpp"
#include "loom/train/trainer.hpp"
#include "serial_layout.hpp"
#include "tiny_config.hpp"

namespace loom::plan {
namespace {

TEST(MixedPrecisionState, PublishedFormulasWhenEveryParameterIsBf16) {
  // Psi_32 = 0: 18 Psi, 6 Psi + 12 Psi / N, 2 Psi + 16 Psi / N, 18 Psi / N (ZeRO, table 1's
  // K = 12 plus 2 bytes of fp32 gradients beyond fp16 ones).
  const int64_t P = 1 << 20, N = 4;
  EXPECT_EQ(mixed_precision_state_bytes(P, 0, N, 0, 8).total(), 18 * P);
  EXPECT_EQ(mixed_precision_state_bytes(P, 0, N, 1, 8).total(), 6 * P + 12 * P / N);
  EXPECT_EQ(mixed_precision_state_bytes(P, 0, N, 2, 8).total(), 2 * P + 16 * P / N);
  EXPECT_EQ(mixed_precision_state_bytes(P, 0, N, 3, 8).total(), 18 * P / N);
  // Parameters read outside GEMMs keep 4 more bytes each under ZeRO-1/2 only.
  EXPECT_EQ(mixed_precision_state_bytes(P, 1000, N, 1, 8).total(), 6 * P + 12 * P / N + 4000);
  EXPECT_EQ(mixed_precision_state_bytes(P, 1000, N, 0, 8).total(), 18 * P);
  EXPECT_EQ(mixed_precision_state_bytes(P, 1000, N, 3, 8).total(), 18 * P / N);
  // Those no GEMM reads (LayerNorms, biases, the position table) have no bf16 copy under DDP,
  // which converts only what its GEMMs read; ZeRO's bf16 gathers hold every parameter in bf16.
  const int64_t F = 600;
  EXPECT_EQ(mixed_precision_state_bytes(P, 1000, N, 0, 8, 0, F).total(), 18 * P - 2 * F);
  EXPECT_EQ(mixed_precision_state_bytes(P, 1000, N, 1, 8, 0, F).total(), 6 * P + 12 * P / N + 4000);
  EXPECT_EQ(mixed_precision_state_bytes(P, 1000, N, 2, 8, 0, F).total(), 2 * P + 16 * P / N + 4000);
  EXPECT_EQ(mixed_precision_state_bytes(P, 1000, N, 3, 8, 0, F).total(), 18 * P / N);
  // Parameters kept in fp32 (routers): no bf16 copy, whole in fp32 under DDP and ZeRO-1/2, 4 bytes
  // sharded under ZeRO-3, instead of 2 + 4 / N (and 6 / N).
  const int64_t K = 4096;
  EXPECT_EQ(mixed_precision_state_bytes(P, 0, N, 0, 8, K).total(), 18 * P - 2 * K);
  EXPECT_EQ(mixed_precision_state_bytes(P, 0, N, 1, 8, K).total(), 6 * P + 12 * P / N - 2 * K - 4 * K / N + 4 * K);
  EXPECT_EQ(mixed_precision_state_bytes(P, 0, N, 3, 8, K).total(), 18 * P / N - 2 * K / N);
}

ClusterSpec cpu_bf16() {
  ClusterSpec c = cluster_preset("local-default");
  c.precision = Precision::Bf16;
  return c;
}

TEST(PlanBf16, MemoryOfASerialLayoutByHand) {
  const ModelSpec m{"m", 4, 128, 4, 128, 128};
  Layout l = testing::serial_layout(8);
  ClusterSpec fp32 = cluster_preset("local-default");
  const LayoutCost c = predict(m, cpu_bf16(), l, 8), f = predict(m, fp32, l, 8);
  ASSERT_TRUE(c.valid) << c.why_not;
  const int64_t P = 12 * 4 * 128 * 128 + 13 * 4 * 128 + 128 * 128 + 128 * 128 + 2 * 128;
  // No bf16 copy of what no GEMM reads: the blocks' biases and LayerNorms, the position table
  // and the final LayerNorm (the tied token table has one: the LM head's GEMMs read it).
  const int64_t gemm_free = 13 * 4 * 128 + 128 * 128 + 2 * 128;
  EXPECT_EQ(c.state_bytes, 18 * P - 2 * gemm_free);
  // The terms a rank's count adds up (a pipeline's or tensor-parallel rank's), fp32 less bf16:
  // each layer keeps bf16 copies of its 16 B T C values (2 bytes less each) and no
  // probabilities (NH B T^2 values of 4 bytes), only their rows' fp32 log-sum-exp (NH B T
  // values); outside the layers the final LayerNorm's input and output are bf16 (4 B T C bytes
  // less); the backward's passing gradients are fp32 in both, and in bf16 (rather than the
  // head's bf16 block of 1024 rows of the logits' gradient, held before them) one layer's
  // attention backward recomputes the probabilities of a group of heads (all 8 x 4 here) one
  // causal block of R = 64 rows at a time: its scores and their gradient in fp32 and bf16
  // (R T x 12 bytes a head), its q and dout rows in bf16 and output rows in fp32 (R HS x 8), the
  // keys and values up to its end in bf16 and their gradients in fp32 (T HS x 12), and its rows'
  // log-sum-exp and 1 / sum (R x 8).
  const int64_t B = 8, T = 128, C = 128, NH = 4, R = 64, HS = C / NH;
  const int64_t attention_scratch = B * NH * (R * T * 12 + R * HS * 8 + T * HS * 12 + R * 8);
  const std::vector<nn::GPTStage> whole{nn::GPTStage{0, 4, true, true}};
  auto sum = [&](bool bf16) {
    const RankShape shape{.batch = B, .seq = T, .hidden = C, .heads = NH, .vocab = 128, .bf16 = bf16};
    return rank_activation_bytes(shape, activation_terms(shape), whole, nullptr);
  };
  EXPECT_EQ(sum(false) - sum(true),
            4 * (2 * 16 * B * T * C + 4 * NH * B * T * T - 4 * NH * B * T) + 4 * B * T * C - attention_scratch);
  // A whole model on one rank peaks as the 1 x 1 grid counts it, moment by moment: below the sum.
  EXPECT_EQ(c.activation_bytes,
            grid_3d_activation_bytes({.B = B, .T = T, .C = C, .NH = NH, .L = 4, .V = 128, .bf16 = true}));
  EXPECT_LT(c.activation_bytes, sum(true));
  EXPECT_LT(c.activation_bytes, f.activation_bytes);
  // ZeRO-1 over dp 2: bf16 weights, the Linear weights' fp32 values dropped, master and moments sharded.
  l.dp = 2;
  l.micro_batch = 4;
  l.zero = 1;
  const int64_t linear = 4 * 12 * 128 * 128;
  EXPECT_EQ(predict(m, cpu_bf16(), l, 8).state_bytes, 2 * P + 4 * (P - linear) + 4 * P + 12 * P / 2);
}

// The activations one more layer keeps for backward, measured by the tracker as the
// difference between a 3- and a 2-layer model's saved activations after forward, against
// what `--dry-run`, memory.json and the planner count (train::layer_activation_bytes, the
// same tolerance as the fp32 ActivationMemory test). In bf16 the layer keeps bf16 copies and
// no probabilities: well under half its fp32 bytes at T = 64, where those are 2/3 of them.
TEST(PlanBf16, LayerActivationsMatchTheTracker) {
  train::TrainConfig t = testing::tiny_config();
  t.model.n_embd = 32;
  t.model.n_head = 2;
  t.model.block_size = 64;
  t.batch_size = 2;
  auto saved_after_forward = [&](int64_t L, kernels::Precision p) {
    kernels::PrecisionScope precision(p);
    nn::GPTConfig config = t.model;
    config.n_layer = L;
    nn::GPT model(config, 1);
    const Tensor idx = Tensor::zeros({t.batch_size, config.block_size}, DType::I32);
    MemoryScope scope(MemoryCategory::Activations);
    const int64_t before = MemoryTracker::instance().current(MemoryCategory::Activations);
    nn::Context ctx;
    const Tensor logits = model.forward(idx, ctx);
    return MemoryTracker::instance().current(MemoryCategory::Activations) - before;
  };
  for (const char* precision : {"fp32", "bf16"}) {
    const kernels::Precision p = kernels::parse_precision(precision);
    t.precision = precision;
    const int64_t measured = saved_after_forward(3, p) - saved_after_forward(2, p);
    const int64_t predicted = train::layer_activation_bytes(t);
    EXPECT_NEAR(static_cast<double>(measured), static_cast<double>(predicted), 0.10 * static_cast<double>(predicted))
        << precision;
  }
  t.precision = "fp32";
  const int64_t fp32 = train::layer_activation_bytes(t);
  EXPECT_EQ(kBf16HeadGradientRows, nn::GPT::kHeadGradientRows);
  for (const auto& [B, T, NH] : {std::array<int64_t, 3>{8, 128, 4}, {3, 1024, 2}, {2, 1100, 4}, {4, 1024, 12}})
    EXPECT_EQ(attention_group_values(B, T, NH), kernels::attention_group_values(B, T, NH)) << B << " " << T << " " << NH;
  for (const auto& [B, T, NH] : {std::array<int64_t, 3>{8, 256, 6}, {3, 1024, 2}, {2, 1100, 4}, {4, 1024, 12}, {2, 5, 4}})
    for (const int64_t t : {1, 2})
      EXPECT_EQ(plan::bf16_attention_backward_bytes(B, T, 32 * NH, NH, t),
                kernels::attention_backward_bf16_bytes(B, T, 32 * NH / t, NH / t))
          << B << " " << T << " " << NH << " tp " << t;
  t.precision = "bf16";
  EXPECT_LT(2 * train::layer_activation_bytes(t), fp32);
}

TEST(PlanBf16, PredictsTheTrackedPeakOfASerialBf16Step) {
  train::TrainConfig t = testing::tiny_config();
  t.model.n_embd = 64;
  t.model.n_head = 4;
  t.model.block_size = 64;
  t.batch_size = 4;
  t.steps = 1;
  t.precision = "bf16";
  MemoryTracker& tracker = MemoryTracker::instance();
  const int64_t before = tracker.total_current();
  tracker.reset_peaks();
  train::Trainer trainer(t, true);
  trainer.train_step();
  const int64_t measured = tracker.total_peak() - before;
  const ModelSpec m{"m", 2, 64, 4, 64, 128};  // the character vocabulary (65) padded to 128 rows
  const LayoutCost c = predict(m, cpu_bf16(), testing::serial_layout(4), 4);
  EXPECT_NEAR(static_cast<double>(c.memory_bytes()), static_cast<double>(measured), 0.10 * measured)
      << "predicted " << c.memory_bytes() << " measured " << measured;
}

// Loom in bf16 moves activations at 2 bytes a value (comm/activation_wire.hpp): on a link
// without latency the pipeline's transfers, the cp ring and the expert all-to-alls take half
// the fp32 time; the tp collectives' activations halve while the loss's three floats a token
// do not; the 3D grid's row and col traffic halves, its depth gradients do not.
TEST(PlanBf16, PricesActivationTrafficAtTwoBytes) {
  ClusterSpec fp32 = cluster_preset("local-default");
  fp32.intra_node = fp32.inter_node = LinkCost{.alpha_s = 0, .beta_s_per_byte = 1e-9};
  ClusterSpec bf16 = fp32;
  bf16.precision = Precision::Bf16;
  EXPECT_EQ(wire_bytes(Precision::Bf16), 2);
  EXPECT_EQ(wire_bytes(Precision::Mixed), 2);
  EXPECT_EQ(wire_bytes(Precision::Fp32), 4);
  ModelSpec m{"m", 4, 128, 4, 256, 128};
  Layout l = testing::serial_layout(2);
  l.pp = 2;
  l.tp = 2;
  l.cp = 2;
  const LayoutCost f = predict(m, fp32, l, 8), b = predict(m, bf16, l, 8);
  ASSERT_TRUE(f.valid && b.valid) << f.why_not << b.why_not;
  EXPECT_NEAR(b.time.pp_comm_s, 0.5 * f.time.pp_comm_s, 1e-15);
  EXPECT_NEAR(b.time.cp_link_s, 0.5 * f.time.cp_link_s, 1e-15);
  EXPECT_GT(f.time.pp_comm_s, 0.0);
  EXPECT_LT(b.time.tp_comm_s, f.time.tp_comm_s);
  EXPECT_GT(b.time.tp_comm_s, 0.5 * f.time.tp_comm_s);  // the loss's statistics stay fp32
  // The counted bytes: tensor parallelism's activations halve, the rest does not.
  const int64_t tp32 = tensor_parallel_bytes_per_step(2, 256, 128, 4, 256, 4, true, 0, 4),
                tp16 = tensor_parallel_bytes_per_step(2, 256, 128, 4, 256, 4, true, 0, 2),
                rest = tensor_parallel_bytes_per_step(2, 256, 128, 4, 256, 4, true, 0, 0);
  EXPECT_EQ(tp16 - rest, (tp32 - rest) / 2);
  EXPECT_EQ(pipeline_bytes_per_step(100, 4, 3, 2), pipeline_bytes_per_step(100, 4, 3, 4) / 2);
  // A mixture of experts: its all-to-alls at half the time.
  m.moe = {.experts = 4, .top_k = 2, .every = 1};
  Layout e = testing::serial_layout(2);
  e.dp = 2;
  e.ep = 2;
  e.zero = 0;
  const LayoutCost fe = predict(m, fp32, e, 8), be = predict(m, bf16, e, 8);
  ASSERT_TRUE(fe.valid && be.valid) << fe.why_not << be.why_not;
  EXPECT_GT(fe.time.ep_comm_s, 0.0);
  EXPECT_NEAR(be.time.ep_comm_s, 0.5 * fe.time.ep_comm_s, 1e-15);
  // 3D: row and col carry activations only; depth its weight gathers in bf16, gradients in fp32.
  const Gpt3DShape shape{.B = 1, .T = 64, .C = 128, .L = 2, .Vp = 128, .block_size = 64, .M = 2};
  const Grid3DBytes g32 = tensor_parallel_3d_bytes_per_step(shape, 2, 2, 2, 4, 4),
                    g16 = tensor_parallel_3d_bytes_per_step(shape, 2, 2, 2, 2, 4),
                    grads = tensor_parallel_3d_bytes_per_step(shape, 2, 2, 2, 0, 4);
  EXPECT_EQ(2 * g16.row, g32.row);
  EXPECT_EQ(2 * g16.col, g32.col);
  EXPECT_EQ(2 * (g16.depth - grads.depth), g32.depth - grads.depth);
  EXPECT_GT(grads.depth, 0);
}

// The dgx-a100 preset trains as the published runs did (Narayanan et al. 2021): mixed
// precision, bf16/fp16 tensor-core GEMMs at their peak, 2-byte weights and activations (on the
// wire too) with fp32 master weights and moments, unless --precision says otherwise.
TEST(PlanBf16, TheDgxA100PresetTrainsInMixedPrecision) {
  const ClusterSpec a100 = cluster_preset("dgx-a100");
  EXPECT_EQ(a100.precision, Precision::Mixed);
  EXPECT_EQ(value_bytes(a100.precision), 2);
  EXPECT_EQ(wire_bytes(a100.precision), 2);
  EXPECT_EQ(a100.peak_flops, 312e12);  // the A100's dense bf16 peak, not its 19.5 TFLOP/s fp32 one
  const ModelSpec m = model_preset("gpt2-small");
  Layout l = testing::serial_layout(4);
  l.dp = 2;
  l.zero = 0;
  const int64_t P = m.parameters();
  EXPECT_EQ(predict(m, a100, l, 8).state_bytes, 16 * P);  // 2 + 2 + 12 bytes a parameter
  ClusterSpec fp32 = a100;
  fp32.precision = Precision::Fp32;
  EXPECT_EQ(predict(m, fp32, l, 8).state_bytes, 16 * P);  // 4 + 4 + 8
  EXPECT_GT(predict(m, fp32, l, 8).activation_bytes, predict(m, a100, l, 8).activation_bytes);
}

}  // namespace
}  // namespace loom::plan
