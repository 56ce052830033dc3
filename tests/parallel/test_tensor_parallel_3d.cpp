// 3D tensor parallelism's layers against the serial layers. A pair of linear layers as a
// transformer block asks for them (a fused QKV-like first layer in 3 blocks with its output
// split over row, then a second layer with the roles of row and col swapped, its input split
// over row and its output gathered whole), built by the 3D layer builder on every grid R x C x D of the world (1-8
// ranks, (t,1,1), (1,t,1), (1,1,t), 2x2x2, odd sizes), must give the serial pair's output and
// input gradient for this rank's batch rows (the batch is split over depth), and each
// parameter's gradient as the mean over depth (relative 1e-5 of the largest magnitude).
// Shapes that do not divide the grid take the serial fallback, with the same results.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "comm/mpi_test_env.hpp"
#include "loom/comm/device_mesh.hpp"
#include "loom/error.hpp"
#include "loom/parallel/tensor_parallel_3d/layers_3d.hpp"
#include "loom/parallel/tensor_parallel_3d/linear_3d.hpp"
#include "loom/tensor/memory_tracker.hpp"
#include "loom/train/memory_budget.hpp"
#include "loom/train/trainer.hpp"
#include "parallel/equivalence.hpp"
#include "parallel/pipeline_peak.hpp"
#include "step_activation_peak.hpp"
#include "test_util.hpp"

namespace loom::parallel::tp3d {
namespace {

using loom::testing::all_close;
using loom::testing::random_vector;
using loom::testing::world;

Tensor tensor_of(const std::vector<float>& v, const Shape& shape) {
  Tensor t = Tensor::empty(shape);
  std::copy(v.begin(), v.end(), t.f32());
  return t;
}

::testing::AssertionResult close(const Tensor& got, const Tensor& want, const std::string& what) {
  float scale = 0.0f;
  for (int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, std::fabs(want.f32()[i]));
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << what << ": shape " << shape_str(got.shape()) << ", want " << shape_str(want.shape());
  return all_close(got.f32(), want.f32(), want.numel(), 0, 1e-5 * scale + 1e-7, what);
}

Tensor piece_of(const Tensor& full, const nn::Parameter& p) {
  Tensor local = Tensor::empty(p.shape());
  nn::copy_shard(full, local, p.shard_spec());
  return local;
}

Tensor scaled(const Tensor& t, float s) {
  Tensor out = Tensor::empty(t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) out.f32()[i] = t.f32()[i] * s;
  return out;
}

// Rows [k n, (k + 1) n) of the first dimension.
Tensor rows_of(const Tensor& full, int64_t k, int64_t n) {
  Shape shape = full.shape();
  shape[0] = n;
  Tensor out = Tensor::empty(shape);
  out.copy_from(full.narrow(k * n, n));
  return out;
}

struct GridCase {
  int R, C, D;
  int64_t in, hidden, out;  // first layer in -> hidden (3 blocks), second hidden -> out
  bool expect_3d;           // every layer of the pair divides the grid
};

void PrintTo(const GridCase& c, std::ostream* os) {
  *os << "grid " << c.R << "x" << c.C << "x" << c.D << ", " << c.in << "->" << c.hidden << "->" << c.out;
}

class Pair3D : public ::testing::TestWithParam<GridCase> {};

TEST_P(Pair3D, MatchesTheSerialPair) {
  const GridCase k = GetParam();
  if (k.R * k.C * k.D != world().size()) GTEST_SKIP() << "grid of " << k.R * k.C * k.D << " ranks";
  comm::DeviceMesh mesh(world(), {{"depth", k.D}, {"row", k.R}, {"col", k.C}});
  const Grid3D grid(mesh.group("row"), mesh.group("col"), mesh.group("depth"));
  const Layers3D layers(grid);
  std::unique_ptr<nn::Linear> first = layers.column_parallel_linear(k.in, k.hidden, 3);
  std::unique_ptr<nn::Linear> second = layers.row_parallel_linear(k.hidden, k.out);
  EXPECT_EQ(layers.fallbacks().empty(), k.expect_3d);
  for (const Layers3D::Fallback& f : layers.fallbacks()) EXPECT_FALSE(f.why.empty());

  nn::Linear s1(k.in, k.hidden), s2(k.hidden, k.out);
  uint64_t seed = 11;
  for (nn::Linear* s : {&s1, &s2})
    for (nn::Parameter* p : s->parameters()) p->value().copy_from(tensor_of(random_vector(p->numel(), seed++), p->shape()));
  for (auto [s, p] : {std::pair{&s1, first.get()}, std::pair{&s2, second.get()}}) {
    p->weight().value().copy_from(piece_of(s->weight().value(), p->weight()));
    p->bias()->value().copy_from(piece_of(s->bias()->value(), *p->bias()));
  }
  const int64_t n = 3, D = k.D, d = grid.rank(Axis::Depth);  // 3 rows of (n, 2, C) per depth rank
  const Tensor x = tensor_of(random_vector(D * n * 2 * k.in, 3), {D * n, 2, k.in});
  const Tensor dz = tensor_of(random_vector(D * n * 2 * k.out, 5), {D * n, 2, k.out});
  nn::Context sc, pc;
  const Tensor h_serial = s1.forward(x, sc);
  const Tensor z_serial = s2.forward(h_serial, sc);
  const Tensor dh_serial = s2.backward(dz, sc);
  const Tensor dx_serial = s1.backward(dh_serial, sc);
  // Between the two, features are split over row: the first layer's in its 3 blocks (q, k,
  // v of this rank's heads), the second's contiguous (the heads' outputs, as attention
  // leaves them), so each layer is fed the serial run's tensor in its own layout.
  const Tensor h = first->forward(rows_of(x, d, n), pc);
  EXPECT_TRUE(close(h, grid.slice_features(rows_of(h_serial, d, n), Axis::Row, 3), "first layer's output"));
  const Tensor z = second->forward(grid.slice_features(rows_of(h_serial, d, n), Axis::Row), pc);
  EXPECT_TRUE(close(z, rows_of(z_serial, d, n), "output"));
  const Tensor dh = second->backward(rows_of(dz, d, n), pc);
  EXPECT_TRUE(close(dh, grid.slice_features(rows_of(dh_serial, d, n), Axis::Row), "second layer's dx"));
  const Tensor dx = first->backward(grid.slice_features(rows_of(dh_serial, d, n), Axis::Row, 3), pc);
  EXPECT_TRUE(close(dx, rows_of(dx_serial, d, n), "dx"));
  // Each depth rank's loss is the mean of its rows: the gradients are the depth mean, 1/D of
  // the serial sum. A replicated-over-depth parameter is averaged here as the recipe does.
  for (auto [s, p] : {std::pair{&s1, first.get()}, std::pair{&s2, second.get()}}) {
    for (auto [sp, pp] : {std::pair{&s->weight(), &p->weight()}, std::pair{s->bias(), p->bias()}}) {
      Tensor g = Tensor::empty(pp->shape());
      g.copy_from(pp->grad());
      if (!layers.depth_sharded(*pp)) grid.group(Axis::Depth).all_reduce(g, comm::ReduceOp::Avg);
      EXPECT_TRUE(close(g, piece_of(scaled(sp->grad(), 1.0f / static_cast<float>(D)), *pp), "grad of " + sp->name()));
    }
  }
}

std::vector<GridCase> grid_cases() {
  std::vector<GridCase> cases{{1, 1, 1, 4, 6, 2, true}, {1, 1, 1, 7, 6, 5, true}};
  for (int t : {2, 3, 4, 5, 8}) {
    // Divisible: in and out multiples of t, hidden of 3 blocks x t.
    cases.push_back({t, 1, 1, 4 * t, 6 * t, 2 * t, true});
    cases.push_back({1, t, 1, 4 * t, 6 * t, 2 * t, true});
    cases.push_back({1, 1, t, 4 * t, 6 * t, 2 * t, true});
    // 7 input features do not split over col, 2t + 1 outputs not over depth.
    cases.push_back({1, t, 1, 7, 6 * t, 5, false});
    cases.push_back({1, 1, t, 7, 6 * t, 2 * t + 1, false});
  }
  cases.push_back({2, 2, 2, 8, 24, 8, true});
  cases.push_back({2, 2, 1, 6, 12, 6, true});
  cases.push_back({1, 2, 2, 8, 12, 8, true});
  cases.push_back({2, 1, 2, 6, 12, 6, true});
  cases.push_back({2, 2, 2, 7, 12, 8, false});  // first layer serial (7 inputs), the second 3D
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Grids, Pair3D, ::testing::ValuesIn(grid_cases()), [](const auto& info) {
  const GridCase& c = info.param;
  return "r" + std::to_string(c.R) + "c" + std::to_string(c.C) + "d" + std::to_string(c.D) + "_" + std::to_string(c.in) +
         "_" + std::to_string(c.hidden) + "_" + std::to_string(c.out);
});

TEST(Linear3D, NamesWhyAShapeDoesNotDivide) {
  comm::DeviceMesh mesh(world(), {{"depth", 1}, {"row", 1}, {"col", world().size()}});
  const Grid3D grid(mesh.group("row"), mesh.group("col"), mesh.group("depth"));
  if (world().size() == 1) GTEST_SKIP() << "every shape divides one rank";
  const std::string why = Linear3D::misfit(world().size() * 2 + 1, 8, 1, grid, Roles{});
  EXPECT_NE(why.find("input features do not split over col " + std::to_string(world().size())), std::string::npos) << why;
  EXPECT_THROW(Linear3D(world().size() * 2 + 1, 8, 1, grid, Roles{}), Error);
}

// The overlap starts the same collectives earlier and waits for them later: the run must be
// the blocking run bit for bit, with recompute (its replayed forwards prefetch a layer whose
// backward is done) and micro-batches (gradients completed across them). 1,2,2 has a col
// axis: the outputs summed over it piece by piece, and the input gradients gathered over it
// behind their sum, in fp32 and in bf16 (packed for the wire once the sum is done).
TEST(Overlap3D, TrainsBitForBitLikeTheBlockingPath) {
  if (world().size() != 4) GTEST_SKIP() << "a grid of 4 ranks";
  for (auto [grid, precision] : {std::pair{"2,1,2", "fp32"}, {"1,2,2", "fp32"}, {"1,2,2", "bf16"}}) {
    SCOPED_TRACE(std::string(grid) + " " + precision);
    std::vector<loom::testing::equivalence::TrainingRun> runs;
    for (const char* overlap : {"off", "on"}) {
      train::TrainConfig c = loom::testing::equivalence::tiny(1, 2, 2);
      c.tp_3d = grid;
      c.precision = precision;
      c.model.recompute = true;
      c.tp_3d_overlap = overlap;
      c.steps = 3;
      train::Trainer t(c, true, &world());
      runs.push_back(loom::testing::equivalence::run(t));
    }
    EXPECT_EQ(runs[0].losses, runs[1].losses);
    EXPECT_EQ(runs[0].grads, runs[1].grads);
    EXPECT_EQ(runs[0].params, runs[1].params);
  }
}

// Mixed precision under a grid: each weight shard gets one bf16 copy a step (the formula's 2
// bytes a parameter), which the depth gather sends and the GEMMs read. Gathering the fp32 shard
// and converting it at every gather, or (depth 1) handing the GEMMs fp32 weights to convert per
// call, leaves no copy: the parameters 32% short of the formula here. The biases, LayerNorm
// gains and position table, which no GEMM reads, have none, in the formula too.
TEST(MixedPrecision3DMemory, EachWeightShardHasOneBf16Copy) {
  if (world().size() != 2) GTEST_SKIP() << "grids of 2 ranks";
  for (const char* grid : {"1,1,2", "2,1,1"}) {
    SCOPED_TRACE(grid);
    MemoryTracker& m = MemoryTracker::instance();
    const int64_t params0 = m.current(MemoryCategory::Parameters);
    train::TrainConfig c = loom::testing::equivalence::tiny(1, 2, 1);
    c.tp_3d = grid;
    c.precision = "bf16";
    c.model.n_embd = 64;  // the weights 98% of the parameters
    train::Trainer t(c, true, &world());
    t.train_step();
    t.train_step();
    EXPECT_EQ(m.current(MemoryCategory::Parameters) - params0, t.state_formula().params);
  }
}

// --dry-run's and the memory check's model state of a grid rank (train::rank_training_state)
// against what the tracker measures between steps on every rank: its shard of each Linear3D
// weight (rows over out x depth, columns over in) and bias (over out), and whole what the grid
// does not split (embeddings, LayerNorms, the head; a layer whose shapes do not divide the grid,
// kept serial by Layers3D: width 18 on depth 4 keeps qkv and both projections whole, fc split),
// fp32 and bf16 (each weight shard's bf16 copy). It once counted the whole model's parameters on
// every grid rank (2,2,1 in fp32: 142336 B for 66304).
struct TrainerGrid {
  std::string grid;
  int64_t width;
};

// Grids of this world's 4 or 8 ranks, width 18 where layers fall back to serial; at 8 ranks
// `eight` (none elsewhere).
std::vector<TrainerGrid> trainer_grids(std::vector<TrainerGrid> eight) {
  if (world().size() == 4) return {{"2,2,1", 16}, {"1,2,2", 16}, {"2,1,2", 16}, {"1,1,4", 18}};
  if (world().size() == 8) return eight;
  return {};
}

// What the tracker counts as model state now: parameters, gradients and optimizer state.
int64_t tracked_state() {
  const MemoryTracker& m = MemoryTracker::instance();
  return m.current(MemoryCategory::Parameters) + m.current(MemoryCategory::Gradients) +
         m.current(MemoryCategory::OptimizerState);
}

TEST(Trainer3D, DryRunStateOfEveryGridRankIsTheTrackers) {
  const std::vector<TrainerGrid> grids = trainer_grids({{"2,2,2", 16}, {"2,1,4", 16}});
  if (grids.empty()) GTEST_SKIP() << "grids of 4 and 8 ranks";
  for (const TrainerGrid& g : grids)
    for (const std::string precision : {"fp32", "bf16"}) {
      const std::string what = g.grid + ", width " + std::to_string(g.width) + ", " + precision;
      const int64_t state0 = tracked_state();
      train::TrainConfig c = loom::testing::equivalence::tiny(1, 2, 1);
      c.tp_3d = g.grid;
      c.model.n_embd = g.width;
      c.precision = precision;
      train::Trainer t(c, true, &world());
      t.train_step();
      t.train_step();
      const int64_t measured = tracked_state() - state0;
      EXPECT_EQ(train::rank_training_state(t.config()).total(), measured) << what << ", grid rank " << world().rank();
      EXPECT_EQ(t.state_formula().total(), measured) << what << ": memory.json's formula";
    }
}

// --dry-run's and the memory check's activations of a grid rank (train::rank_training_memory,
// plan/tensor_parallel_3d_memory.hpp) against the tracker's activation peak over a step after a
// warm one, on every rank, exactly: the blocks' tensors split as the grid splits them (heads
// and the MLP over row, the qkv and fc inputs over col, nothing over depth but the weights) and
// the serial fallbacks' whole ones (width 18: on depth 4 qkv and both projections, on 2,2,2 the
// projections, whose bf16 input a serial MLP projection gathers widened), fp32 and bf16, with and
// without recompute, and in fp32 with selective recompute (no probabilities kept, two scratches
// of a head group's scores in the attention backward), at whichever moment peaks (the head's
// backward, the last block's MLP projection or attention backward, that projection's replayed
// forward). It once counted every
// grid rank as the serial run: 2,2,1 in fp32 101632 B for 65536, bf16 82176 for 49408; and a
// serial MLP projection on a row split refused a bf16 input ("expected an f32 tensor").
TEST(Trainer3D, DryRunActivationsOfEveryGridRankAreTheTrackersPeak) {
  const std::vector<TrainerGrid> grids = trainer_grids({{"2,2,2", 16}, {"2,2,2", 18}});
  if (grids.empty()) GTEST_SKIP() << "grids of 4 and 8 ranks";
  for (const TrainerGrid& g : grids)
    for (const std::string precision : {"fp32", "bf16", "fp32 selective"})
      for (const bool recompute : {false, true}) {
        const std::string what = g.grid + ", width " + std::to_string(g.width) + ", " + precision +
                                 (recompute ? ", recompute" : "") + ", grid rank " + std::to_string(world().rank());
        train::TrainConfig c = loom::testing::equivalence::tiny(1, 2, 1);
        c.tp_3d = g.grid;
        c.model.n_embd = g.width;
        c.model.recompute = recompute;
        c.model.selective_recompute = precision == "fp32 selective";
        c.precision = precision.substr(0, 4);
        train::Trainer t(c, true, &world());
        const int64_t measured = loom::testing::step_activation_peak(t);
        EXPECT_EQ(train::rank_training_memory(t.config(), 0).activations, measured) << what;
        EXPECT_EQ(train::training_memory(t.config()).activations, measured) << what;
      }
}

// A pipeline of grids (pp 2 over 2-rank grids on 4 ranks, one over each axis; at 8 ranks a
// 2,2,1 grid interleaved over two chunks): every grid rank of every stage holds the state the
// memory check counts, to the byte, and peaks as the pipeline check counts it (the late count
// never below the peak, the on-time one within 12%: pipeline_peak.hpp), fp32 and bf16, with
// and without recompute (measured: the on-time count equal to the peak on every rank, the late
// one 1.01-1.19 of it). Before the memory check counted a grid's pipeline, it counted every
// grid rank as holding the whole model and one micro-batch.
TEST(Trainer3D, PipelineOfGridsHoldsWhatTheMemoryCheckCounts) {
  std::vector<std::pair<std::string, std::string>> layouts;  // grid, schedule
  if (world().size() == 4) layouts = {{"2,1,1", "1f1b"}, {"1,2,1", "gpipe"}, {"1,1,2", "1f1b"}};
  if (world().size() == 8) layouts = {{"2,2,1", "interleaved"}};
  if (layouts.empty()) GTEST_SKIP() << "pp 2 over grids of 2 ranks (4 ranks) or of 4 (8 ranks)";
  for (const auto& [grid, schedule] : layouts)
    for (const std::string precision : {"fp32", "bf16"})
      for (const bool recompute : {false, true}) {
        train::TrainConfig c = loom::testing::equivalence::tiny(1, 2, 4);
        c.model.n_layer = 4;
        c.pp = 2;
        c.schedule = schedule;
        c.chunks = schedule == "interleaved" ? 2 : 1;
        c.tp_3d = grid;
        c.model.recompute = recompute;
        c.precision = precision;
        const std::string what = "pp 2 x tp_3d " + grid + ", " + schedule + ", " + precision +
                                 (recompute ? ", recompute" : "") + ", rank " + std::to_string(world().rank());
        const int64_t state0 = tracked_state();
        train::Trainer t(c, true, &world());
        const int64_t peak = loom::testing::step_activation_peak(t);
        const int64_t state = tracked_state() - state0;
        const int64_t stage = t.parallelized().group("pp").rank();
        EXPECT_EQ(train::rank_training_state(t.config(), stage).total(), state) << what;
        loom::testing::expect_pipeline_peak(t, peak, what);
      }
}

// Ring attention on grids (cp 2 over 2-rank grids on 4 ranks, one over each axis): each grid
// rank holds its tokens' share of the grid's split tensors and ring attention's scratch for its
// row of heads; the memory check counts state and activation peak to the byte on every rank,
// fp32 and bf16, with and without recompute.
TEST(Trainer3D, ContextParallelGridsHoldWhatTheMemoryCheckCounts) {
  if (world().size() != 4) GTEST_SKIP() << "cp 2 over grids of 2 ranks on 4 ranks";
  for (const std::string grid : {"2,1,1", "1,2,1", "1,1,2"})
    for (const std::string precision : {"fp32", "bf16"})
      for (const bool recompute : {false, true}) {
        train::TrainConfig c = loom::testing::equivalence::tiny(1, 2, 1);
        c.cp = 2;
        c.tp_3d = grid;
        c.model.recompute = recompute;
        c.precision = precision;
        const std::string what = "cp 2 x tp_3d " + grid + ", " + precision + (recompute ? ", recompute" : "") +
                                 ", rank " + std::to_string(world().rank());
        const int64_t state0 = tracked_state();
        train::Trainer t(c, true, &world());
        const int64_t peak = loom::testing::step_activation_peak(t);
        const int64_t state = tracked_state() - state0;
        EXPECT_EQ(train::rank_training_state(t.config()).total(), state) << what;
        EXPECT_EQ(train::rank_training_memory(t.config(), 0).activations, peak) << what;
      }
}

// ZeRO over two replicas of a 2-rank grid (4 ranks), each stage, fp32 and bf16, two
// micro-batches: every rank holds the model state the memory check counts (its grid shard's
// flat units sharded over dp; under bf16 gathers the weights held in bf16 only), ZeRO's
// gathered units and full gradients at the step's peak, and the grid's activations, each to
// the byte.
TEST(Trainer3D, ZeroOverGridsHoldsWhatTheMemoryCheckCounts) {
  if (world().size() != 4) GTEST_SKIP() << "dp 2 over grids of 2 ranks on 4 ranks";
  for (const std::string grid : {"1,1,2", "2,1,1"})
    for (const int64_t zero : {1, 2, 3})
      for (const std::string precision : {"fp32", "bf16"}) {
        train::TrainConfig c = loom::testing::equivalence::tiny(2, 2, 2);
        c.tp_3d = grid;
        c.zero = zero;
        c.precision = precision;
        const std::string what = "dp 2 x tp_3d " + grid + ", zero " + std::to_string(zero) + ", " + precision +
                                 ", rank " + std::to_string(world().rank());
        const int64_t state0 = tracked_state();
        train::Trainer t(c, true, &world());
        const int64_t gathered = loom::testing::step_peak(t, MemoryCategory::Gathered);
        const int64_t activations = loom::testing::step_activation_peak(t);
        const int64_t state = tracked_state() - state0;
        EXPECT_EQ(train::rank_training_state(t.config()).total(), state) << what;
        EXPECT_EQ(t.state_formula().total(), state) << what << ": memory.json's formula";
        EXPECT_EQ(gathered > 0, zero >= 2) << what << ": units held whole in a step";
        EXPECT_EQ(train::training_memory(t.config()).gathered, static_cast<double>(gathered)) << what;
        EXPECT_EQ(train::rank_training_memory(t.config(), 0).activations, activations) << what;
      }
}

TEST(Trainer3D, AGridThatDoesNotFitTheWorldIsAnErrorOnEveryRank) {
  // Checked before any collective, so every rank stops with the same message (never a hang):
  // a grid alone, a pipeline of grids and a ring around grids.
  for (const auto& [pp, cp] : {std::pair<int64_t, int64_t>{1, 1}, {2, 1}, {1, 2}}) {
    train::TrainConfig c = loom::testing::equivalence::tiny(1, 2, 1);
    c.pp = pp;
    c.cp = cp;
    c.tp_3d = "1,1," + std::to_string(world().size() + 1);
    const std::string error = loom::testing::error_of([&] { train::Trainer t(c, true, &world()); });
    const int64_t ranks = pp * cp * (world().size() + 1);
    EXPECT_NE(error.find("pp(" + std::to_string(pp) + ") x cp(" + std::to_string(cp) + ") x tp(1) x tp_3d(" + c.tp_3d +
                         ") = " + std::to_string(ranks) + " != world size " + std::to_string(world().size())),
              std::string::npos)
        << error;
  }
}

}  // namespace
}  // namespace loom::parallel::tp3d
