// The equivalence contract over a table of short cases (3 steps each): the main layouts again
// under AdamW without clipping and under SGD with momentum 0.9 (their updates scale with the
// gradient, so a gradient off by a constant factor moves the parameters), and the paths the
// other suites miss: interleaved with 3 chunks, an uneven pp_layers split, HSDP with shard
// sizes 1 and 4 and with tp, recompute with ZeRO and with tp; 3D tensor parallelism on the
// grids of 2-8 ranks (each axis alone, 2x2x2, 4x2x1, 2x1x4, odd sizes), 4D with dp, with
// recompute and with micro-batches, overlapped (the default) and blocking (dp x depth share the batch: the serial run takes all of it). Each case must give the serial
// run's gradients before clipping, losses, parameters (equivalence.hpp) and validation loss
// (relative 1e-5); a case whose layout does not fit the world is skipped, with the reason.
// Last, the gradient check itself must fail on a gradient scaled by 2 on one rank.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

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
  int64_t tp = 1, pp = 1, cp = 1;  // dp is the rest of the world
  int64_t zero = 0;
  int64_t hsdp_shard = 0;  // > 0: dp must hold two shard groups at least
  std::string schedule = "1f1b";
  int64_t chunks = 1;
  std::string pp_layers{};
  std::string schedule_file{};  // relative to the source tree
  bool recompute = false;
  std::string optimizer = "adamw";
  double grad_clip = 1.0;
  int64_t n_layer = 2;
  int64_t micro_batches = 1;
  std::string cp_split = "zigzag";
  int64_t block_size = 16;  // cp: divisible by 2 x cp
  bool sequence_parallel = false;
  std::string tp_3d{};  // "R,C,D"; the grid's ranks times tp x pp divide the world
  int64_t n_head = 4, n_embd = 16;
  int64_t world = 0;  // > 0: run on this many ranks only (keeps the suite short)
  std::string precision = "fp32";
  std::string tp_3d_overlap = "on";  // with tp_3d: "off" runs the blocking path
  std::string grad_reduce_dtype = "fp32";
  std::string tp_overlap = "on";  // with tp: "off" runs the blocking path
  double hidden_dropout = 0.0;
  double attention_dropout = 0.0;
  bool selective_recompute = false;
  std::string zero3_reshard = "micro-batch";
};

// 3D grid {R, C, D} of a case ({1, 1, 1} without tp_3d).
std::array<int64_t, 3> grid_of(const Case& c) {
  train::TrainConfig t;
  t.tp_3d = c.tp_3d;
  return t.tp_3d_grid();
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Why c cannot run on p ranks, or "" when it can.
std::string misfit(const Case& c, int64_t p) {
  if (c.world > 0 && p != c.world) return "runs on " + std::to_string(c.world) + " ranks only";
  const std::array<int64_t, 3> g = grid_of(c);
  const int64_t model_ranks = c.tp * c.pp * c.cp * g[0] * g[1] * g[2];
  if (p % model_ranks != 0) return "the model's " + std::to_string(model_ranks) + " ranks do not divide the world";
  const int64_t dp = p / model_ranks;
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
  c.model.block_size = k.block_size;
  c.model.n_head = k.n_head;
  c.model.n_embd = k.n_embd;
  c.model.padded_vocab_size = 64 * k.tp * ((65 + 64 * k.tp - 1) / (64 * k.tp));
  c.optimizer = k.optimizer;
  c.grad_clip = k.grad_clip;
  if (k.optimizer == "sgd") c.lr = 0.05;  // momentum 0.9: moves parameters well past the tolerance
  c.eval_batches = 2;
  c.precision = k.precision;
  c.grad_reduce_dtype = k.grad_reduce_dtype;
  c.model.hidden_dropout = k.hidden_dropout;
  c.model.attention_dropout = k.attention_dropout;
  c.model.selective_recompute = k.selective_recompute;
  return c;
}

// Gradients reduced in bf16 on the wire: each element is rounded to bf16 when sent and each
// of the dp - 1 additions rounds the running sum, at most 2^-8 relative each (half of bf16's
// 2^-7 spacing). The roundings are independent, so a tensor's gradient stays within the bf16
// bound of 6e-2 of its scale (the serial run reduces nothing: the comparison sees all of it).
// Its AdamW steps then differ a little from the serial run's, and so do the next steps'
// gradient norms: 1.5e-3 relative measured (zero3, dp 3), bound 5e-3.
constexpr double kBf16ReduceGradNorm = 5e-3;

class EquivalenceTable : public ::testing::TestWithParam<Case> {};

TEST_P(EquivalenceTable, SameGradientsLossesParametersAndValidationLossAsSerial) {
  const Case k = GetParam();
  const int64_t p = world().size();
  if (const std::string why = misfit(k, p); !why.empty()) GTEST_SKIP() << "on " << p << " ranks: " << why;
  const std::array<int64_t, 3> g = grid_of(k);
  const int64_t dp = p / (k.tp * k.pp * k.cp * g[0] * g[1] * g[2]);
  Tolerances tol = k.precision == "bf16" || k.grad_reduce_dtype == "bf16" ? kBf16Tolerances : Tolerances{};
  if (k.grad_reduce_dtype == "bf16") tol.grad_norm = kBf16ReduceGradNorm;
  const TrainingRun& want = serial_run(common(k, 1, 2 * dp * g[2]), tol.grad, /*evaluate=*/true);
  train::TrainConfig c = common(k, dp, 2);
  c.tp = k.tp;
  c.pp = k.pp;
  c.cp = k.cp;
  c.cp_split = k.cp_split;
  c.sequence_parallel = k.sequence_parallel;
  c.zero = k.zero;
  c.hsdp_shard = k.hsdp_shard;
  c.schedule = k.schedule;
  c.chunks = k.chunks;
  c.pp_layers = k.pp_layers;
  if (!k.schedule_file.empty()) c.schedule_file = std::string(LOOM_SOURCE_DIR) + "/" + k.schedule_file;
  c.model.recompute = k.recompute;
  c.tp_3d = k.tp_3d;
  c.tp_3d_overlap = k.tp_3d_overlap;
  c.tp_overlap = k.tp_overlap;
  c.zero3_reshard = k.zero3_reshard;
  train::Trainer parallel(c, true, &world());
  const std::string what = k.name + " (dp " + std::to_string(dp) + ")";
  expect_equivalent(run(parallel), want, c, what, tol);
  const float val = parallel.evaluate(), serial_val = *want.val_loss;
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

Case bf16_reduce(Case c) {
  c.name += "_reduce_bf16";
  c.grad_reduce_dtype = "bf16";
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
        // A schedule whose last backward is micro-batch 0 (LIFO): data parallelism and sequence
        // parallelism must reduce after it, not after micro-batch m-1's.
        Case{.name = "lifo_schedule_file_dp", .pp = 2, .schedule_file = "configs/schedules/gpipe_lifo_pp2_m4.txt",
             .n_layer = 4, .micro_batches = 4},
        Case{.name = "lifo_schedule_file_tp2_sp", .tp = 2, .pp = 2,
             .schedule_file = "configs/schedules/gpipe_lifo_pp2_m4.txt", .n_layer = 4, .micro_batches = 4,
             .sequence_parallel = true},
        Case{.name = "hsdp_shard1_zero3", .zero = 3, .hsdp_shard = 1},
        Case{.name = "hsdp_shard4_zero2", .zero = 2, .hsdp_shard = 4},
        Case{.name = "hsdp_shard1_tp2_zero1", .tp = 2, .zero = 1, .hsdp_shard = 1},
        Case{.name = "hsdp_shard2_tp2_zero3", .tp = 2, .zero = 3, .hsdp_shard = 2},
        // A pipeline with ZeRO-1, hybrid-sharded: two replicas of 2 shards (ZeRO-2/3: below).
        Case{.name = "hsdp_shard2_pp2_zero1", .pp = 2, .zero = 1, .hsdp_shard = 2, .n_layer = 4, .micro_batches = 4,
             .world = 8},
        Case{.name = "recompute_zero3", .zero = 3, .recompute = true},
        Case{.name = "recompute_tp2", .tp = 2, .recompute = true},
        // Selective recompute (the probabilities recomputed): with tp + sp and a pipeline, and on a 3D grid.
        Case{.name = "selective_pp2_tp2_sp", .tp = 2, .pp = 2, .n_layer = 4, .micro_batches = 4, .sequence_parallel = true,
             .selective_recompute = true},
        Case{.name = "selective_tp3d_2x1x2", .micro_batches = 2, .tp_3d = "2,1,2", .world = 4, .selective_recompute = true}),
    [](const auto& info) { return info.param.name; });

// ZeRO-2/3 under pipelines: each chunk's blocks and its other parameters are units of their own,
// reduce-scattered in every micro-batch's backward (stage 3 gathering them before each forward
// and backward), and the tied token table is a unit of its own on both end stages, whose
// reduced shards are summed over the two. Each schedule, an uneven split (different units on
// the two stages), a schedule whose last backward is micro-batch 0, SGD (a gradient scaled on
// one stage moves the parameters), bf16, and with tp + sp, HSDP and a 3D grid (8 ranks).
INSTANTIATE_TEST_SUITE_P(
    PipelineZero, EquivalenceTable,
    ::testing::Values(sgd(Case{.name = "pp2_zero2", .pp = 2, .zero = 2, .n_layer = 4, .micro_batches = 4, .world = 4}),
                      no_clip(Case{.name = "pp2_gpipe_zero3", .pp = 2, .zero = 3, .schedule = "gpipe", .n_layer = 4,
                                   .micro_batches = 4, .world = 4}),
                      Case{.name = "pp2_interleaved_3chunks_zero3", .pp = 2, .zero = 3, .schedule = "interleaved",
                           .chunks = 3, .n_layer = 6, .micro_batches = 4, .world = 4},
                      Case{.name = "pp_layers_3_1_zero2", .pp = 2, .zero = 2, .pp_layers = "3,1", .n_layer = 4,
                           .micro_batches = 4, .world = 4},
                      Case{.name = "lifo_schedule_file_zero3", .pp = 2, .zero = 3,
                           .schedule_file = "configs/schedules/gpipe_lifo_pp2_m4.txt", .n_layer = 4, .micro_batches = 4,
                           .world = 4},
                      bf16(Case{.name = "pp2_zero3", .pp = 2, .zero = 3, .n_layer = 4, .micro_batches = 4, .world = 4}),
                      Case{.name = "pp2_zero3_tp2_sp", .tp = 2, .pp = 2, .zero = 3, .n_layer = 4, .micro_batches = 4,
                           .sequence_parallel = true, .world = 8},
                      Case{.name = "hsdp_shard2_pp2_zero2", .pp = 2, .zero = 2, .hsdp_shard = 2, .n_layer = 4,
                           .micro_batches = 4, .world = 8},
                      Case{.name = "pp2_zero3_tp3d_1x1x2", .pp = 2, .zero = 3, .n_layer = 4, .micro_batches = 4,
                           .tp_3d = "1,1,2", .world = 8},
                      // ZeRO-3 gathering each unit once a step (zero3_reshard = "step"): with and
                      // without a pipeline, accumulation, recompute, bf16.
                      Case{.name = "pp2_gpipe_zero3_reshard_step", .pp = 2, .zero = 3, .schedule = "gpipe", .n_layer = 4,
                           .micro_batches = 4, .world = 4, .zero3_reshard = "step"},
                      sgd(Case{.name = "zero3_reshard_step_mb3_recompute", .zero = 3, .recompute = true,
                               .micro_batches = 3, .zero3_reshard = "step"}),
                      bf16(Case{.name = "pp2_interleaved_zero3_reshard_step", .pp = 2, .zero = 3,
                                .schedule = "interleaved", .chunks = 2, .n_layer = 4, .micro_batches = 4, .world = 4,
                                .zero3_reshard = "step"})),
    [](const auto& info) { return info.param.name; });

// Context parallelism: each sequence split over cp ranks (ring attention), alone, with dp
// (the rest of the world), with ZeRO, an odd cp (block_size 24, divisible by 2 x 3), with tp
// (sequence parallel: see below) and pp (1F1B), the contiguous split under recompute.
INSTANTIATE_TEST_SUITE_P(
    ContextParallel, EquivalenceTable,
    ::testing::Values(Case{.name = "cp2", .cp = 2}, Case{.name = "cp4", .cp = 4, .micro_batches = 2},
                      Case{.name = "cp2_zero2", .cp = 2, .zero = 2, .micro_batches = 2},
                      Case{.name = "cp3_block24", .cp = 3, .block_size = 24},
                      Case{.name = "cp2_tp2_sp", .tp = 2, .cp = 2, .sequence_parallel = true},
                      Case{.name = "cp2_pp2", .pp = 2, .cp = 2, .n_layer = 4, .micro_batches = 4},
                      Case{.name = "cp2_pp2_tp2_sp", .tp = 2, .pp = 2, .cp = 2, .n_layer = 4, .micro_batches = 4,
                           .sequence_parallel = true},
                      Case{.name = "cp2_contiguous_recompute_zero1", .cp = 2, .zero = 1, .recompute = true,
                           .cp_split = "contiguous"}),
    [](const auto& info) { return info.param.name; });

// 1D tensor parallelism's overlap (tp_overlap, on by default: the rows above run it too):
// sequence parallel at tp 2, tp 3 (odd: block_size 24 splits over 3) and tp 4 (the LM head's
// gather over 4 chunks; fp32 and bf16), with recompute, micro-batches, and the blocking path.
INSTANTIATE_TEST_SUITE_P(
    TensorParallelOverlap, EquivalenceTable,
    ::testing::Values(Case{.name = "tp2_sp_overlap", .tp = 2, .sequence_parallel = true},
                      Case{.name = "tp3_sp_overlap", .tp = 3, .block_size = 24, .sequence_parallel = true, .n_head = 3,
                           .n_embd = 24},
                      Case{.name = "tp2_sp_overlap_recompute_mb2", .tp = 2, .recompute = true, .micro_batches = 2,
                           .sequence_parallel = true},
                      Case{.name = "tp3_sp_blocking", .tp = 3, .block_size = 24, .sequence_parallel = true, .n_head = 3,
                           .n_embd = 24, .tp_overlap = "off"},
                      Case{.name = "tp4_sp_overlap", .tp = 4, .sequence_parallel = true, .world = 4},
                      bf16(Case{.name = "tp4_sp_overlap", .tp = 4, .sequence_parallel = true, .world = 4})),
    [](const auto& info) { return info.param.name; });

// 3D tensor parallelism: the rest of the world is dp (the 4D hybrid).
INSTANTIATE_TEST_SUITE_P(
    TensorParallel3D, EquivalenceTable,
    ::testing::Values(Case{.name = "tp3d_2x2x2", .tp_3d = "2,2,2", .world = 8},
                      Case{.name = "tp3d_8x1x1", .tp_3d = "8,1,1", .n_head = 8, .world = 8},
                      Case{.name = "tp3d_1x8x1", .tp_3d = "1,8,1", .world = 8},
                      Case{.name = "tp3d_1x1x8", .tp_3d = "1,1,8", .world = 8},
                      Case{.name = "tp3d_1x2x4", .tp_3d = "1,2,4", .world = 8},
                      Case{.name = "tp3d_2x2x1", .tp_3d = "2,2,1", .world = 4},
                      sgd(Case{.name = "tp3d_2x1x2_dp2", .micro_batches = 2, .tp_3d = "2,1,2", .world = 8}),
                      Case{.name = "tp3d_3x1x1", .tp_3d = "3,1,1", .n_head = 3, .n_embd = 24, .world = 3},
                      Case{.name = "tp3d_1x1x2_dp2_recompute", .recompute = true, .tp_3d = "1,1,2", .world = 4},
                      Case{.name = "tp3d_4x2x1", .tp_3d = "4,2,1", .world = 8},
                      Case{.name = "tp3d_2x1x4", .tp_3d = "2,1,4", .world = 8},
                      Case{.name = "tp3d_1x2x2_recompute_blocking", .recompute = true, .micro_batches = 2,
                           .tp_3d = "1,2,2", .world = 4, .tp_3d_overlap = "off"},
                      Case{.name = "tp3d_2x1x2_recompute", .recompute = true, .micro_batches = 2, .tp_3d = "2,1,2",
                           .world = 4}),
    [](const auto& info) { return info.param.name; });

// 3D tensor parallelism inside each pipeline stage: every grid rank sends its stage's output to
// the grid rank of the same coordinates on the next stage, and the replicated parameters' mean
// over depth and the tied table's sum over the first and last stage both run. Each schedule, a
// grid over each axis, with dp, recompute, selective recompute, the blocking path and bf16.
INSTANTIATE_TEST_SUITE_P(
    PipelineOfGrids, EquivalenceTable,
    ::testing::Values(Case{.name = "pp2_tp3d_1x1x2", .pp = 2, .n_layer = 4, .micro_batches = 4, .tp_3d = "1,1,2", .world = 4},
                      Case{.name = "pp2_gpipe_tp3d_1x2x1_recompute", .pp = 2, .schedule = "gpipe", .recompute = true,
                           .n_layer = 4, .micro_batches = 4, .tp_3d = "1,2,1", .world = 4},
                      // dp 2: the depth mean blocking, before DDP reads the gradients.
                      Case{.name = "pp2_tp3d_1x1x2_dp2_selective", .pp = 2, .n_layer = 4, .micro_batches = 4,
                           .tp_3d = "1,1,2", .world = 8, .selective_recompute = true},
                      Case{.name = "pp2_interleaved_tp3d_2x2x1", .pp = 2, .schedule = "interleaved", .chunks = 2,
                           .n_layer = 4, .micro_batches = 4, .tp_3d = "2,2,1", .world = 8},
                      Case{.name = "pp2_tp3d_1x2x2_blocking", .pp = 2, .n_layer = 4, .micro_batches = 4, .tp_3d = "1,2,2",
                           .world = 8, .tp_3d_overlap = "off"},
                      bf16(Case{.name = "pp2_tp3d_2x1x1", .pp = 2, .n_layer = 4, .micro_batches = 4, .tp_3d = "2,1,1",
                                .world = 4})),
    [](const auto& info) { return info.param.name; });

// Ring attention on 3D grids: each grid rank's K/V pass around the cp ranks of its grid
// coordinates; the replicated gradients' mean over depth runs before DDP over cp reads them
// (overlapped only without dp and cp: under cp 2 x 1,1,2 the overlapped mean left DDP a qkv
// bias gradient 63% off). Zig-zag and contiguous splits, recompute, dp, a pipeline, bf16.
INSTANTIATE_TEST_SUITE_P(
    ContextParallelGrids, EquivalenceTable,
    ::testing::Values(Case{.name = "cp2_tp3d_1x1x2", .cp = 2, .tp_3d = "1,1,2", .world = 4},
                      Case{.name = "cp2_contiguous_recompute_tp3d_1x2x1", .cp = 2, .recompute = true,
                           .cp_split = "contiguous", .tp_3d = "1,2,1", .world = 4},
                      Case{.name = "cp2_tp3d_2x1x1_dp2_mb2", .cp = 2, .micro_batches = 2, .tp_3d = "2,1,1", .world = 8},
                      Case{.name = "cp2_pp2_tp3d_1x1x2", .pp = 2, .cp = 2, .n_layer = 4, .micro_batches = 4,
                           .tp_3d = "1,1,2", .world = 8},
                      // Heads split over row: the last stage's copy of the token table stays
                      // whole (the ring's builder once split it over row, a collective mismatch).
                      Case{.name = "cp2_pp2_tp3d_2x1x1", .pp = 2, .cp = 2, .n_layer = 4, .micro_batches = 4,
                           .tp_3d = "2,1,1", .world = 8},
                      bf16(Case{.name = "cp2_tp3d_2x1x1", .cp = 2, .tp_3d = "2,1,1", .world = 4})),
    [](const auto& info) { return info.param.name; });

// ZeRO over the data-parallel replicas of 3D grids: each grid rank's flat shard (its piece of
// every Linear3D weight, whole what the grid does not split) sharded again over dp. The
// overlapped depth reduce-scatters of the weight gradients land before a unit's reduce-scatter
// reads them (they finished after the block's backward: zero 1 x 1,1,2 had a qkv gradient 22%
// off, zero 2 read a released gradient), the replicated gradients' depth mean runs every
// backward under ZeRO-2/3's fresh buffers, and under ZeRO-3 the prefetch of the next block's
// first weight waits for ZeRO's gather (it read a released value). Every stage, HSDP,
// a pipeline, a ring, micro-batches, recompute, the blocking path, bf16, SGD (an odd dp: the
// 6-rank mpi.verify_zero3_over_grids_dp3).
INSTANTIATE_TEST_SUITE_P(
    ZeroGrids, EquivalenceTable,
    ::testing::Values(Case{.name = "zero1_tp3d_1x1x2", .zero = 1, .tp_3d = "1,1,2", .world = 4},
                      Case{.name = "zero2_tp3d_2x1x1_mb2", .zero = 2, .micro_batches = 2, .tp_3d = "2,1,1", .world = 4},
                      sgd(Case{.name = "zero3_tp3d_1x1x2_mb2", .zero = 3, .micro_batches = 2, .tp_3d = "1,1,2", .world = 4}),
                      Case{.name = "zero3_tp3d_1x2x1_recompute", .zero = 3, .recompute = true, .tp_3d = "1,2,1", .world = 4},
                      Case{.name = "zero2_tp3d_1x1x2_blocking", .zero = 2, .tp_3d = "1,1,2", .world = 4, .tp_3d_overlap = "off"},
                      Case{.name = "hsdp_shard2_zero2_tp3d_1x1x2", .zero = 2, .hsdp_shard = 2, .tp_3d = "1,1,2", .world = 8},
                      Case{.name = "zero1_pp2_tp3d_1x1x2", .pp = 2, .zero = 1, .n_layer = 4, .micro_batches = 4,
                           .tp_3d = "1,1,2", .world = 8},
                      Case{.name = "zero2_cp2_tp3d_1x1x2", .cp = 2, .zero = 2, .tp_3d = "1,1,2", .world = 8},
                      bf16(Case{.name = "zero3_tp3d_2x1x1", .zero = 3, .tp_3d = "2,1,1", .world = 4}),
                      bf16(Case{.name = "zero1_tp3d_1x1x2_mb2", .zero = 1, .micro_batches = 2, .tp_3d = "1,1,2", .world = 4})),
    [](const auto& info) { return info.param.name; });

// Mixed precision through every layout family, against the serial bf16 run.
INSTANTIATE_TEST_SUITE_P(
    MixedPrecision, EquivalenceTable,
    ::testing::Values(bf16(kDdp), bf16(kZero1), bf16(kZero2), bf16(kZero3),
                      bf16(Case{.name = "tp2_sp", .tp = 2, .sequence_parallel = true}), bf16(kPp),
                      bf16(Case{.name = "pp2_gpipe", .pp = 2, .schedule = "gpipe", .n_layer = 4, .micro_batches = 4}),
                      bf16(Case{.name = "interleaved", .pp = 2, .schedule = "interleaved", .chunks = 2, .n_layer = 4, .micro_batches = 4}),
                      bf16_reduce(bf16(kDdp)), bf16_reduce(bf16(kZero1)), bf16_reduce(bf16(kZero3)),
                      bf16_reduce(bf16(Case{.name = "hsdp_shard2_zero2", .zero = 2, .hsdp_shard = 2})),
                      bf16_reduce(kZero2),
                      // Activations crossing in bf16 on every model-parallel wire: tp without
                      // sequence parallelism, the cp ring alone and with tp + sp, a 3D grid
                      // (bf16 weight gathers over depth, fp32 dW reduce-scatters), and one
                      // with two axes of activation all-reduces and dp.
                      bf16(kTp), bf16(Case{.name = "cp2", .cp = 2}),
                      bf16(Case{.name = "cp2_tp2_sp", .tp = 2, .cp = 2, .sequence_parallel = true}),
                      bf16(Case{.name = "tp3d_2x1x2", .micro_batches = 2, .tp_3d = "2,1,2", .world = 4}),
                      bf16(Case{.name = "tp3d_2x2x2", .tp_3d = "2,2,2", .world = 8}),
                      // Width 18: the MLP's projection does not divide the grid and runs serial
                      // on a row split, gathering GELU's bf16 output (refused until widened).
                      bf16(Case{.name = "tp3d_2x2x2_width18", .tp_3d = "2,2,2", .n_head = 2, .n_embd = 18, .world = 8}),
                      bf16(Case{.name = "tp3d_1x2x2_dp2_blocking", .tp_3d = "1,2,2", .world = 8, .tp_3d_overlap = "off"})),
    [](const auto& info) { return info.param.name; });

// The layouts each kind of dropout (p 0.2) runs in, plus `more`, each named with `suffix`:
// every layout must draw the serial run's masks on its rows and micro-batches (dp, a
// pipeline's later stages), its chunk of each sequence (cp's zig-zag, sequence parallelism's
// tp chunks), its heads (tp's ranks, 3D's row axis) and its ring blocks' positions, and draw
// them again in recompute's replay. A rank that drew another mask drops a different fifth of a
// tensor: far past the tolerances.
std::vector<Case> dropout_cases(double Case::*p, const std::string& suffix, std::vector<Case> more) {
  std::vector<Case> cases{kDdp, kTp, Case{.name = "tp2_sp", .tp = 2, .sequence_parallel = true},
                          Case{.name = "cp2_mb2", .cp = 2, .micro_batches = 2},
                          Case{.name = "cp2_tp2_sp", .tp = 2, .cp = 2, .sequence_parallel = true},
                          Case{.name = "interleaved", .pp = 2, .schedule = "interleaved", .chunks = 2, .n_layer = 4,
                               .micro_batches = 4},
                          Case{.name = "tp3d_2x1x2", .micro_batches = 2, .tp_3d = "2,1,2", .world = 4},
                          Case{.name = "recompute_tp2_sp", .tp = 2, .recompute = true, .sequence_parallel = true},
                          bf16(Case{.name = "pp2_cp2", .pp = 2, .cp = 2, .n_layer = 4, .micro_batches = 4})};
  cases.insert(cases.end(), more.begin(), more.end());
  for (Case& c : cases) {
    c.name += suffix;
    c.*p = 0.2;
  }
  return cases;
}

// Hidden dropout, also under ZeRO-3 (its units gathered around a dropped branch).
INSTANTIATE_TEST_SUITE_P(HiddenDropout, EquivalenceTable,
                         ::testing::ValuesIn(dropout_cases(&Case::hidden_dropout, "_dropout", {kZero3})),
                         [](const auto& info) { return info.param.name; });

// Attention dropout (on the probabilities), in the fp32 kernel, the bf16 one (bf16 tp, with
// its heads split) and the ring's (fp32 and bf16).
INSTANTIATE_TEST_SUITE_P(AttentionDropout, EquivalenceTable,
                         ::testing::ValuesIn(dropout_cases(&Case::attention_dropout, "_attention_dropout", {bf16(kTp)})),
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
