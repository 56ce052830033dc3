// The equivalence contract over a table of short cases (3 steps each): the main layouts again
// under AdamW without clipping and under SGD with momentum 0.9 (their updates scale with the
// gradient, so a gradient off by a constant factor moves the parameters), and the paths the
// other suites miss: interleaved with 3 chunks, an uneven pp_layers split, HSDP with shard
// sizes 1 and 4 and with tp, recompute with ZeRO and with tp. Each case must give the serial
// run's gradients before clipping, losses, parameters (equivalence.hpp) and validation loss
// (relative 1e-5); a case whose layout does not fit the world is skipped, with the reason.
// Last, the gradient check itself must fail on a gradient scaled by 2 on one rank.
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <string>

#include "comm/mpi_test_env.hpp"
#include "loom/train/trainer.hpp"
#include "parallel/equivalence.hpp"
#include "test_util.hpp"

namespace loom::parallel::equivalence_table_test {
namespace {

using loom::testing::world;
using namespace loom::testing::equivalence;

struct Case {
  std::string name{};
  int64_t tp = 1, pp = 1;  // dp is the rest of the world
  bool sequence_parallel = false;
  int64_t zero = 0;
  int64_t hsdp_shard = 0;  // > 0: dp must hold two shard groups at least
  std::string schedule = "1f1b";
  int64_t chunks = 1;
  std::string pp_layers{};
  bool recompute = false;
  std::string optimizer = "adamw";
  double grad_clip = 1.0;
  int64_t n_layer = 2;
  int64_t micro_batches = 1;
  std::string precision = "fp32";
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Why c cannot run on p ranks, or "" when it can.
std::string misfit(const Case& c, int64_t p) {
  if (p % (c.tp * c.pp) != 0) return "pp " + std::to_string(c.pp) + " x tp " + std::to_string(c.tp) + " does not divide the world";
  const int64_t dp = p / (c.tp * c.pp);
  const int64_t min_dp = c.hsdp_shard > 0 ? 2 * c.hsdp_shard : (c.zero > 0 ? 2 : 1);
  if (dp < min_dp || (c.hsdp_shard > 0 && dp % c.hsdp_shard != 0))
    return "needs dp >= " + std::to_string(min_dp) + (c.hsdp_shard > 0 ? " in groups of " + std::to_string(c.hsdp_shard) : "") +
           ", the world leaves dp " + std::to_string(dp);
  return "";
}

// What the serial run and the layout share: the model, the optimizer, the steps.
train::TrainConfig common(const Case& k, int64_t dp, int64_t batch) {
  train::TrainConfig c = tiny(dp, batch, k.micro_batches);
  c.steps = 3;
  c.warmup_steps = 1;
  c.model.n_layer = k.n_layer;
  c.model.n_head = 4;
  c.model.padded_vocab_size = 64 * k.tp * ((65 + 64 * k.tp - 1) / (64 * k.tp));
  c.optimizer = k.optimizer;
  c.grad_clip = k.grad_clip;
  if (k.optimizer == "sgd") c.lr = 0.05;  // momentum 0.9: moves parameters well past the tolerance
  c.eval_batches = 2;
  c.precision = k.precision;
  return c;
}

// bf16 against the serial bf16 run: both round the same GEMM operands to bf16, but values that
// differ in their last fp32 bits (another reduction order, another row split) can round to
// neighbouring bf16 values, 2^-8 apart relative, and such flips propagate through the layers;
// AdamW's first steps turn a near-zero gradient of the other sign into a parameter difference
// of up to 2 lr a step: parameters pass within 1e-1 of their tensor's scale or within that
// drift (a LayerNorm bias starting at 0 differed by 9.8e-4 at dp 5, the drift bound being
// 2 x 3 steps x 5e-4 = 3e-3). The other bounds are `loom verify --precision bf16`'s
// (measured there: losses 3.8e-6, gradients 1.2e-2 of each tensor's scale); the gradient
// norm, a sum over all those gradients, differed by up to 1.8e-4 relative (dp 3): bound 1e-3.
const Tolerances kBf16Tolerances{.loss = 1e-4, .grad_norm = 1e-3, .grad = 3e-2, .param = 1e-1, .adam_drift = true};

class EquivalenceTable : public ::testing::TestWithParam<Case> {};

TEST_P(EquivalenceTable, SameGradientsLossesParametersAndValidationLossAsSerial) {
  const Case k = GetParam();
  const int64_t p = world().size();
  if (const std::string why = misfit(k, p); !why.empty()) GTEST_SKIP() << "on " << p << " ranks: " << why;
  const int64_t dp = p / (k.tp * k.pp);
  train::Trainer serial(common(k, 1, 2 * dp), /*quiet=*/true);
  const TrainingRun want = run(serial);
  train::TrainConfig c = common(k, dp, 2);
  c.tp = k.tp;
  c.pp = k.pp;
  c.zero = k.zero;
  c.hsdp_shard = k.hsdp_shard;
  c.schedule = k.schedule;
  c.chunks = k.chunks;
  c.pp_layers = k.pp_layers;
  c.model.recompute = k.recompute;
  c.sequence_parallel = k.sequence_parallel;
  train::Trainer parallel(c, true, &world());
  const std::string what = k.name + " (dp " + std::to_string(dp) + ")";
  const Tolerances tol = k.precision == "bf16" ? kBf16Tolerances : Tolerances{};
  expect_equivalent(run(parallel), want, c, what, tol);
  const float val = parallel.evaluate(), serial_val = serial.evaluate();
  EXPECT_NEAR(val, serial_val, tol.loss * std::fabs(serial_val)) << what << " validation loss";
}

Case sgd(Case c) {
  c.name += "_sgd";
  c.optimizer = "sgd";
  c.grad_clip = 0.0;
  return c;
}

Case bf16(Case c) {
  c.name += "_bf16";
  c.precision = "bf16";
  return c;
}

Case no_clip(Case c) {
  c.name += "_adamw_noclip";
  c.grad_clip = 0.0;
  return c;
}

const Case kDdp{.name = "ddp"}, kZero1{.name = "zero1", .zero = 1}, kZero2{.name = "zero2", .zero = 2},
    kZero3{.name = "zero3", .zero = 3}, kTp{.name = "tp2", .tp = 2},
    kPp{.name = "pp2", .pp = 2, .n_layer = 4, .micro_batches = 4};

INSTANTIATE_TEST_SUITE_P(
    Optimizers, EquivalenceTable,
    ::testing::Values(no_clip(kDdp), sgd(kDdp), no_clip(kZero1), sgd(kZero1), no_clip(kZero2), sgd(kZero2),
                      no_clip(kZero3), sgd(kZero3), no_clip(kTp), sgd(kTp), no_clip(kPp), sgd(kPp)),
    [](const auto& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Paths, EquivalenceTable,
    ::testing::Values(
        Case{.name = "interleaved_3chunks", .pp = 2, .schedule = "interleaved", .chunks = 3, .n_layer = 6, .micro_batches = 4},
        Case{.name = "pp_layers_3_1", .pp = 2, .pp_layers = "3,1", .n_layer = 4, .micro_batches = 4},
        Case{.name = "hsdp_shard1_zero3", .zero = 3, .hsdp_shard = 1},
        Case{.name = "hsdp_shard4_zero2", .zero = 2, .hsdp_shard = 4},
        Case{.name = "hsdp_shard1_tp2_zero1", .tp = 2, .zero = 1, .hsdp_shard = 1},
        Case{.name = "hsdp_shard2_tp2_zero3", .tp = 2, .zero = 3, .hsdp_shard = 2},
        Case{.name = "recompute_zero3", .zero = 3, .recompute = true},
        Case{.name = "recompute_tp2", .tp = 2, .recompute = true}),
    [](const auto& info) { return info.param.name; });

// Mixed precision through every layout family, against the serial bf16 run.
INSTANTIATE_TEST_SUITE_P(
    MixedPrecision, EquivalenceTable,
    ::testing::Values(bf16(kDdp), bf16(kZero1), bf16(kZero2), bf16(kZero3),
                      bf16(Case{.name = "tp2_sp", .tp = 2, .sequence_parallel = true}), bf16(kPp),
                      bf16(Case{.name = "pp2_gpipe", .pp = 2, .schedule = "gpipe", .n_layer = 4, .micro_batches = 4}),
                      bf16(Case{.name = "interleaved", .pp = 2, .schedule = "interleaved", .chunks = 2, .n_layer = 4, .micro_batches = 4})),
    [](const auto& info) { return info.param.name; });

TEST(GradientCheck, FailsOnAGradientScaledByTwoOnOneRank) {
  // A gradient off by a constant (reduced twice, averaged over the wrong group) clips to the
  // serial update whenever the norm is past grad_clip: only the gradients before clipping
  // show it. The last rank doubles its reduced gradients; its comparison must fail, the
  // others' must still pass.
  const int p = world().size();
  train::Trainer serial(tiny(1, 2 * p, 1), true);
  train::Trainer ddp(tiny(p, 2, 1), true, &world());
  serial.compute_gradients();
  const train::StepResult r = ddp.compute_gradients();
  EXPECT_GT(r.grad_norm, ddp.config().grad_clip) << "the case the clipped comparison could not see";
  const Gradients want = gradients_of(serial);
  EXPECT_TRUE(gradients_match(gradients_of(ddp), want, 1e-4, "as reduced"));
  const bool culprit = world().rank() == p - 1;
  if (culprit)
    for (nn::Parameter* q : ddp.optimizer().params())
      for (int64_t i = 0; i < q->grad().numel(); ++i) q->grad().f32()[i] *= 2.0f;
  const ::testing::AssertionResult scaled = gradients_match(gradients_of(ddp), want, 1e-4, "doubled on the last rank");
  if (culprit) {
    EXPECT_FALSE(scaled) << "a doubled gradient passed the check";
    EXPECT_NE(std::string(scaled.message()).find("elements differ"), std::string::npos) << scaled.message();
  } else {
    EXPECT_TRUE(scaled);
  }
}

}  // namespace
}  // namespace loom::parallel::equivalence_table_test
