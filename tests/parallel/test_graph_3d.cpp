// Plexus-style 3D-parallel GCN (parallel/graph_3d) against the serial GCN: a table of grids of
// 1, 2, 3, 4 and 8 ranks (each axis alone, odd sizes, 2x2x2, three layers so every rotation of
// the axes' roles runs), with and without the node permutation, on a small R-MAT graph and on
// Cora, dropout and the L2 term on. Each must give the serial run's losses (relative 1e-5),
// gradients before clipping (1e-4 of each tensor's largest magnitude) and parameters after 3
// Adam steps (1e-4 of each tensor's scale); a grid wider than the graph (ranks with no rows or
// columns of Â) must neither hang nor differ. Then the bytes each axis moves per epoch equal
// plan::gcn_3d_bytes_per_epoch on every rank. Plexus's blocked, overlapped aggregation
// (graph_aggregation_chunks) joins the table and the bytes, and trains bit for bit like one sum
// where every axis holds two ranks. Last, checkpoints, which hold the serial tensors
// (a grid's padding left out): with widths the grid divides and with widths it pads, a resume
// under the same grid continues bit for bit and a run moves serial -> grid -> serial like the
// uninterrupted serial run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "comm/mpi_test_env.hpp"
#include "equivalence.hpp"
#include "loom/kernels/sparse.hpp"
#include "loom/parallel/graph_3d/node_layout.hpp"
#include "loom/plan/gcn_cost.hpp"
#include "loom/nn/gcn.hpp"
#include "loom/train/gcn_spec.hpp"
#include "loom/tensor/memory_tracker.hpp"
#include "loom/train/trainer.hpp"
#include "test_util.hpp"

namespace loom::parallel::graph3d {
namespace {

using loom::testing::world;

struct Case {
  std::string name{};
  std::string tp_3d{};
  int64_t world = 0;
  bool permute = true;
  int64_t layers = 2;
  std::string data = "rmat:scale=7,edge_factor=4,features=13,classes=3,seed=2";
  std::string split{};
  std::string precision = "fp32";
  int64_t aggregation_chunks = 1;  // Plexus's blocked, overlapped aggregation (the grid's run only)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

train::TrainConfig gcn_config(const Case& k) {
  train::TrainConfig c;
  c.family = "gcn";
  c.data = k.data;
  c.split = k.split;
  c.gcn.layers = k.layers;
  c.gcn.hidden = 7;  // odd: padded on every split axis
  c.gcn.dropout = 0.5;
  c.steps = 3;
  c.lr = 0.01;
  c.min_lr = 0.01;
  c.warmup_steps = 0;
  c.weight_decay = 5e-4;
  c.grad_clip = 0.0;
  c.threads = 1;
  c.log_every = 100;
  c.eval_every = 0;
  c.checkpoint_every = 0;
  c.out_dir = "";
  c.precision = k.precision;
  // bf16: AdamW steps a near-zero gradient of the other sign by lr the other way (see kBf16),
  // and the next steps' gradients come from parameters that far apart: a smaller lr keeps that
  // drift below the gradients' bound, as the GPT's equivalence runs keep theirs.
  if (k.precision == "bf16") c.lr = c.min_lr = 1e-3;
  return c;
}

struct GcnRun {
  std::vector<float> losses;
  std::vector<std::map<std::string, Tensor>> grads;
  std::map<std::string, Tensor> params;
  train::Allowances adamw_bound{};  // the serial run's (run(t, &tol)): see equivalence::TrainingRun
};

// got's leading block of want's shape (the parallel pieces pad widths to the grid with zeros,
// which must stay zero). allowed: per element of want, on top of rtol (the serial run's AdamW
// bound, as `loom verify` allows it).
::testing::AssertionResult close_unpadded(const Tensor& got, const Tensor& want, double rtol, const std::string& what,
                                          const std::vector<float>* allowed = nullptr) {
  const int64_t rows = want.ndim() == 2 ? want.size(0) : 1, cols = want.size(-1);
  const int64_t got_cols = got.size(-1);
  float scale = 0.0f;
  for (int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, std::fabs(want.f32()[i]));
  for (int64_t i = 0; i < got.numel(); ++i) {
    const int64_t r = i / got_cols, c = i % got_cols;
    const bool inside = r < rows && c < cols;
    const float w = inside ? want.f32()[r * cols + c] : 0.0f;
    const double bound = rtol * scale + (inside && allowed != nullptr ? (*allowed)[r * cols + c] : 0.0);
    if (!(std::fabs(got.f32()[i] - w) <= bound))
      return ::testing::AssertionFailure() << what << " [" << r << "," << c << "]: " << got.f32()[i] << " vs " << w
                                           << " (bound " << bound << ")";
  }
  return ::testing::AssertionSuccess();
}

// fp32: losses relative 1e-5, gradients and parameters 1e-4 of each tensor's largest magnitude.
struct Tolerances {
  double loss = 1e-5, grad = 1e-4, param = 1e-4;
  double later_grad = 1e-4;  // gradients from step 2 on, computed from parameters AdamW may have moved apart
  bool adamw_bound = false;  // also allow each parameter element the serial run's AdamW bound (GcnRun)
};
// bf16 against the serial bf16 run. The two runs round at different points: the serial first
// layer of Cora multiplies its sparse features in fp32 (X W, then Â), the grid aggregates first
// and rounds Â X to bf16 for its GEMM; the grid's sums cross the wire in bf16 (2^-9 relative a
// crossing). A ReLU gate can flip where a pre-activation is within rounding of 0; on a graph of
// 128 nodes one node is a large part of a column's gradient (a flip moved a bias gradient by
// twice its tensor's scale), so these cases run on Cora's 2708, at lr 1e-3 (gcn_config).
// Measured: losses within 8.6e-7 relative; gradients at step 1, from the same parameters,
// within 2.9e-2 of their tensor's scale (bound 6e-2, the GPT's); from step 2 AdamW has stepped
// near-zero gradients of the other sign by lr the other way, and the gradients computed from
// those parameters differ by up to 5.5e-2 (2,2,2, three layers: a bias of 16 values, where
// a flipped gate moves a whole column): bound 1.5e-1. Parameters pass within 1e-1 of their
// scale plus the AdamW bound of gradients within those tolerances (up to 2 lr a step where a
// gradient is within them of zero, next to nothing where it is of ordinary size). A doubled
// sum is off by 1, a missing half by 0.5.
const Tolerances kBf16{.loss = 1e-4, .grad = 6e-2, .param = 1e-1, .later_grad = 1.5e-1, .adamw_bound = true};

// bound_for (the serial run): records the AdamW bound of gradients within the tolerances its
// steps' gradients are compared with.
GcnRun run(train::Trainer& t, const Tolerances* bound_for = nullptr) {
  GcnRun r;
  train::AdamWBound bound;
  while (t.step() < t.config().steps) {
    train::StepResult s = t.compute_gradients();
    std::map<std::string, Tensor> g;
    for (auto& [name, value] : t.gradient_dict()) g[name] = value.clone();
    r.grads.push_back(std::move(g));
    if (bound_for != nullptr)
      testing::equivalence::add_adamw_step(bound, t, s, r.grads.size() == 1 ? bound_for->grad : bound_for->later_grad);
    t.apply_update(s);
    r.losses.push_back(s.loss);
  }
  for (auto& [name, value] : t.state_dict())
    if (name.rfind("model.", 0) == 0) r.params[name] = value.clone();
  r.adamw_bound = bound.allowances();
  return r;
}

class Graph3DEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(Graph3DEquivalence, SameLossesGradientsAndParametersAsSerial) {
  const Case k = GetParam();
  if (world().size() != k.world) GTEST_SKIP() << "runs on " << k.world << " ranks";
  const Tolerances tol = k.precision == "bf16" ? kBf16 : Tolerances{};
  train::Trainer serial(gcn_config(k), true);
  const GcnRun want = run(serial, tol.adamw_bound ? &tol : nullptr);
  train::TrainConfig c = gcn_config(k);
  c.tp_3d = k.tp_3d;
  c.graph_permute = k.permute;
  c.graph_aggregation_chunks = k.aggregation_chunks;
  train::Trainer parallel(c, true, &world());
  const GcnRun got = run(parallel);
  EXPECT_TRUE(testing::all_close(got.losses, want.losses, tol.loss, 0, k.name + " losses"));
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (size_t s = 0; s < want.grads.size(); ++s)
    for (const auto& [name, w] : want.grads[s]) {
      ASSERT_TRUE(got.grads[s].count(name)) << name;
      EXPECT_TRUE(close_unpadded(got.grads[s].at(name), w, s == 0 ? tol.grad : tol.later_grad,
                                 k.name + " step " + std::to_string(s + 1) + " " + name));
    }
  for (const auto& [name, w] : want.params) {
    ASSERT_TRUE(got.params.count(name)) << name;
    const auto bound = want.adamw_bound.find(name);
    const std::vector<float>* allowed = tol.adamw_bound && bound != want.adamw_bound.end() ? &bound->second : nullptr;
    EXPECT_TRUE(close_unpadded(got.params.at(name), w, tol.param, k.name + " " + name, allowed));
  }
  const float val = parallel.evaluate(), serial_val = serial.evaluate();
  EXPECT_NEAR(val, serial_val, tol.loss * std::fabs(serial_val)) << k.name << " validation loss";
}

INSTANTIATE_TEST_SUITE_P(
    Grids, Graph3DEquivalence,
    ::testing::Values(Case{.name = "one_rank", .tp_3d = "1,1,1", .world = 1},
                      Case{.name = "one_rank_file_order", .tp_3d = "1,1,1", .world = 1, .permute = false, .layers = 3},
                      Case{.name = "r2", .tp_3d = "2,1,1", .world = 2}, Case{.name = "c2", .tp_3d = "1,2,1", .world = 2},
                      Case{.name = "d2_file_order", .tp_3d = "1,1,2", .world = 2, .permute = false},
                      Case{.name = "d2_3layers", .tp_3d = "1,1,2", .world = 2, .layers = 3},
                      Case{.name = "r3", .tp_3d = "3,1,1", .world = 3},
                      Case{.name = "c3_file_order", .tp_3d = "1,3,1", .world = 3, .permute = false},
                      Case{.name = "r2c2", .tp_3d = "2,2,1", .world = 4},
                      Case{.name = "c2d2_3layers_file_order", .tp_3d = "1,2,2", .world = 4, .permute = false, .layers = 3},
                      Case{.name = "r2d2_cora", .tp_3d = "2,1,2", .world = 4, .data = LOOM_SOURCE_DIR "/data/cora"},
                      Case{.name = "r2c2d2", .tp_3d = "2,2,2", .world = 8},
                      Case{.name = "r2c2d2_3layers_file_order", .tp_3d = "2,2,2", .world = 8, .permute = false, .layers = 3},
                      // The other grids of 4 and 8 ranks, so every grid of 1, 2, 4 and 8 ranks runs,
                      // alternating Cora and R-MAT, permuted and in file order.
                      Case{.name = "r4_cora", .tp_3d = "4,1,1", .world = 4, .data = LOOM_SOURCE_DIR "/data/cora"},
                      Case{.name = "c4_file_order", .tp_3d = "1,4,1", .world = 4, .permute = false},
                      Case{.name = "d4_3layers", .tp_3d = "1,1,4", .world = 4, .layers = 3},
                      Case{.name = "c2d4", .tp_3d = "1,2,4", .world = 8},
                      Case{.name = "c4d2_cora_file_order", .tp_3d = "1,4,2", .world = 8, .permute = false,
                           .data = LOOM_SOURCE_DIR "/data/cora"},
                      Case{.name = "c8", .tp_3d = "1,8,1", .world = 8},
                      Case{.name = "r2d4_cora", .tp_3d = "2,1,4", .world = 8, .data = LOOM_SOURCE_DIR "/data/cora"},
                      Case{.name = "r2c4_file_order", .tp_3d = "2,4,1", .world = 8, .permute = false},
                      Case{.name = "r4d2_3layers", .tp_3d = "4,1,2", .world = 8, .layers = 3},
                      Case{.name = "r4c2_cora_file_order", .tp_3d = "4,2,1", .world = 8, .permute = false,
                           .data = LOOM_SOURCE_DIR "/data/cora"},
                      Case{.name = "r8", .tp_3d = "8,1,1", .world = 8},
                      // bf16 mixed precision (activation sums and the W gathers in bf16) on 2, 3, 4
                      // and 8 ranks, depth 1 and 2, every rotation of the roles; on Cora (see kBf16).
                      Case{.name = "d2_cora_bf16", .tp_3d = "1,1,2", .world = 2, .data = LOOM_SOURCE_DIR "/data/cora",
                           .precision = "bf16"},
                      Case{.name = "c3_cora_bf16", .tp_3d = "1,3,1", .world = 3, .data = LOOM_SOURCE_DIR "/data/cora",
                           .precision = "bf16"},
                      Case{.name = "r2c2_cora_bf16", .tp_3d = "2,2,1", .world = 4, .data = LOOM_SOURCE_DIR "/data/cora",
                           .precision = "bf16"},
                      Case{.name = "r2c2d2_3layers_cora_bf16", .tp_3d = "2,2,2", .world = 8, .layers = 3,
                           .data = LOOM_SOURCE_DIR "/data/cora", .precision = "bf16"},
                      // 4 nodes on depth 8 (then outer 8): most ranks hold no rows or no columns.
                      Case{.name = "d8_empty_blocks", .tp_3d = "1,1,8", .world = 8, .data = "rmat:scale=2,features=5,classes=2",
                           .split = "0:2,2:3,3:4"},
                      // The blocked, overlapped aggregation: each range of rows summed under the
                      // next range's SpMM, forward over outer and backward over depth; an odd
                      // number of ranges, more ranges than some blocks have rows, and bf16 sums.
                      Case{.name = "d2_chunks3", .tp_3d = "1,1,2", .world = 2, .aggregation_chunks = 3},
                      Case{.name = "r3_chunks2", .tp_3d = "3,1,1", .world = 3, .aggregation_chunks = 2},
                      Case{.name = "r2d2_cora_chunks4", .tp_3d = "2,1,2", .world = 4, .data = LOOM_SOURCE_DIR "/data/cora",
                           .aggregation_chunks = 4},
                      Case{.name = "r2c2_cora_bf16_chunks2", .tp_3d = "2,2,1", .world = 4, .data = LOOM_SOURCE_DIR "/data/cora",
                           .precision = "bf16", .aggregation_chunks = 2},
                      Case{.name = "r2c2d2_3layers_chunks3", .tp_3d = "2,2,2", .world = 8, .layers = 3, .aggregation_chunks = 3},
                      Case{.name = "d8_empty_blocks_chunks3", .tp_3d = "1,1,8", .world = 8,
                           .data = "rmat:scale=2,features=5,classes=2", .split = "0:2,2:3,3:4", .aggregation_chunks = 3}),
    [](const auto& info) { return info.param.name; });

struct BytesCase {
  std::string tp_3d;
  int64_t world, layers;
  std::string precision = "fp32";
  int64_t aggregation_chunks = 1;  // the ranges' sums add up to the whole's bytes
};

void PrintTo(const BytesCase& c, std::ostream* os) { *os << c.tp_3d << " " << c.precision; }

class Graph3DBytes : public ::testing::TestWithParam<BytesCase> {};

TEST_P(Graph3DBytes, MeasuredBytesPerAxisEqualTheModel) {
  const BytesCase k = GetParam();
  if (world().size() != k.world) GTEST_SKIP() << "runs on " << k.world << " ranks";
  train::TrainConfig c = gcn_config(Case{.layers = k.layers, .precision = k.precision});
  c.tp_3d = k.tp_3d;
  c.graph_aggregation_chunks = k.aggregation_chunks;
  train::Trainer t(c, true, &world());
  const train::Parallelized& pz = t.parallelized();
  for (const char* axis : {"row", "col", "depth"}) pz.group(axis).reset_stats();
  t.train_step();
  auto& spec = dynamic_cast<train::GcnSpec&>(t.spec());
  const std::array<int64_t, 3> g = c.tp_3d_grid();
  const data::Graph& graph = spec.graph();
  const plan::GcnShape shape = spec.plan_shape();
  // The loss's traffic depends on how many training nodes this rank's last-layer rows hold
  // (a node in a split has a label: the reader refuses one without; a grid rank keeps no labels).
  const nn::GraphConv& last = *dynamic_cast<nn::GCN&>(*pz.chunks.front()).convs().back();
  ASSERT_TRUE(graph.labels.empty()) << "a grid rank keeps its rows' targets, not the N labels";
  int64_t labelled_rows = 0;
  for (const int64_t node : *last.output_block().nodes)
    labelled_rows += graph.split[static_cast<size_t>(node)] == data::NodeSplit::Train;
  const plan::Grid3DBytes want = plan::gcn_3d_bytes_per_epoch(
      shape, g[0], g[1], g[2], {pz.group("row").rank(), pz.group("col").rank(), pz.group("depth").rank()}, labelled_rows);
  EXPECT_EQ(pz.group("row").stats().bytes, want.row) << "row";
  EXPECT_EQ(pz.group("col").stats().bytes, want.col) << "col";
  EXPECT_EQ(pz.group("depth").stats().bytes, want.depth) << "depth";
}

INSTANTIATE_TEST_SUITE_P(Grids, Graph3DBytes,
                         ::testing::Values(BytesCase{"2,1,1", 2, 2}, BytesCase{"1,1,2", 2, 3}, BytesCase{"3,1,1", 3, 2},
                                           BytesCase{"2,2,1", 4, 3}, BytesCase{"1,2,2", 4, 2}, BytesCase{"2,2,2", 8, 3},
                                           BytesCase{"1,1,2", 2, 3, "bf16"}, BytesCase{"2,2,1", 4, 3, "bf16"},
                                           BytesCase{"2,2,2", 8, 3, "bf16"}, BytesCase{"1,2,2", 4, 2, "fp32", 3},
                                           BytesCase{"2,2,2", 8, 3, "bf16", 2}));


// bf16 on a grid: each rank's W shard gets one bf16 copy a step (the formula's 2 bytes a
// parameter), which the depth gather sends; converting at each GEMM would leave none.
// The blocked aggregation sums each range of rows as the one sum sums them: on grids whose axes
// hold at most 2 ranks (a sum of two is the same in any order), in fp32 and bf16, a run with 3
// ranges is the run with one, bit for bit: losses, every step's gradients and the parameters.
TEST(Graph3DOverlap, BlockedAggregationTrainsBitForBitLikeOneSum) {
  const std::map<int, std::string> grids{{2, "1,1,2"}, {4, "2,1,2"}, {8, "2,2,2"}};
  if (!grids.count(world().size())) GTEST_SKIP() << "runs on 2, 4 or 8 ranks";
  for (const std::string precision : {"fp32", "bf16"}) {
    SCOPED_TRACE(precision);
    train::TrainConfig c = gcn_config(Case{.layers = 3, .precision = precision});
    c.tp_3d = grids.at(world().size());
    train::Trainer one_sum(c, true, &world());
    const GcnRun want = run(one_sum);
    c.graph_aggregation_chunks = 3;
    train::Trainer blocked(c, true, &world());
    const GcnRun got = run(blocked);
    EXPECT_EQ(got.losses, want.losses);
    ASSERT_EQ(got.grads.size(), want.grads.size());
    for (size_t step = 0; step < want.grads.size(); ++step)
      for (const auto& [name, w] : want.grads[step])
        EXPECT_TRUE(testing::all_close(got.grads[step].at(name).f32(), w.f32(), w.numel(), 0.0, 0.0,
                                       "step " + std::to_string(step + 1) + " " + name));
    for (const auto& [name, w] : want.params)
      EXPECT_TRUE(testing::all_close(got.params.at(name).f32(), w.f32(), w.numel(), 0.0, 0.0, name));
  }
}

// Bad values are refused by name: fewer than one range, or ranges where nothing aggregates
// over a grid.
TEST(Graph3DOverlap, BadAggregationChunksAreRefused) {
  train::TrainConfig c = gcn_config(Case{});
  c.tp_3d = "1,1,2";
  c.graph_aggregation_chunks = 0;
  EXPECT_NE(loom::testing::error_of([&] { c.validate(); }).find("graph_aggregation_chunks must be >= 1"),
            std::string::npos);
  c.graph_aggregation_chunks = 2;
  c.tp_3d = "";
  EXPECT_NE(loom::testing::error_of([&] { c.validate(); }).find("it needs model = 'gcn' and tp_3d"), std::string::npos);
}

TEST(Graph3DMixedPrecision, EachWeightShardHasOneBf16Copy) {
  if (world().size() != 2) GTEST_SKIP() << "runs on 2 ranks";
  for (const char* grid : {"1,1,2", "2,1,1"}) {
    SCOPED_TRACE(grid);
    train::TrainConfig c = gcn_config(Case{.data = LOOM_SOURCE_DIR "/data/cora", .precision = "bf16"});
    c.gcn.hidden = 16;
    c.tp_3d = grid;
    MemoryTracker& m = MemoryTracker::instance();
    const int64_t params0 = m.current(MemoryCategory::Parameters);
    train::Trainer t(c, true, &world());
    t.train_step();
    t.train_step();
    EXPECT_EQ(m.current(MemoryCategory::Parameters) - params0, t.state_formula().params);
  }
}

// Checkpoints of a 3D GCN hold the serial tensors. Two 3-layer GCNs on 2,1,2: one whose
// widths the grid splits (hidden 8, 4 classes; 13 features over a col of 1), and one it pads
// (hidden 7 and 3 classes, held as 8 and 4: padding along both splits of a weight and along a
// bias), which its shard specs leave out of the checkpoint. The padded grid writes single-file
// checkpoints (its tensors gathered and cut to the serial shapes), the other sharded ones
// (each piece cut).
struct ResumeCase {
  std::string name;
  int64_t hidden, classes;
  std::string format;
  std::string precision = "fp32";
};
const ResumeCase kResumeCases[] = {{"divisible", 8, 4, "sharded"}, {"padded", 7, 3, "single"}};

train::TrainConfig resume_config(const ResumeCase& k) {
  train::TrainConfig c = gcn_config(
      Case{.layers = 3, .data = "rmat:scale=7,edge_factor=4,features=13,classes=" + std::to_string(k.classes) + ",seed=2"});
  c.gcn.hidden = k.hidden;
  c.checkpoint_format = k.format;
  c.precision = k.precision;
  return c;
}

// Resumed under the same grid, the run goes on bit for bit; in bf16 too (the weights' bf16
// copies made again from the fp32 master the checkpoint holds).
TEST(Graph3DResume, UnderTheSameGridContinuesBitForBit) {
  if (world().size() != 4) GTEST_SKIP() << "runs on 4 ranks";
  std::vector<ResumeCase> cases(std::begin(kResumeCases), std::end(kResumeCases));
  cases.push_back({"padded_bf16", 7, 3, "sharded", "bf16"});
  for (const ResumeCase& k : cases) {
    SCOPED_TRACE(k.name);
    train::TrainConfig c = resume_config(k);
    c.steps = 4;
    c.tp_3d = "2,1,2";
    train::Trainer straight(c, true, &world());
    const GcnRun want = run(straight);

    const std::string dir = testing::equivalence::fresh_shared_dir("loom_gcn3d_resume_" + k.name, world());
    {
      train::TrainConfig first = c;
      first.steps = 2;
      first.out_dir = dir;
      train::Trainer saver(first, true, &world());
      run(saver);
      saver.save_checkpoint_now();
    }
    c.resume = dir;
    train::Trainer resumed(c, true, &world());
    ASSERT_EQ(resumed.step(), 2);
    const GcnRun got = run(resumed);
    EXPECT_EQ(got.losses, std::vector<float>(want.losses.begin() + 2, want.losses.end()));
    ASSERT_EQ(got.params.size(), want.params.size());
    for (const auto& [name, w] : want.params) {
      ASSERT_EQ(got.params.at(name).shape(), w.shape()) << name;
      EXPECT_TRUE(testing::all_close(got.params.at(name).f32(), w.f32(), w.numel(), 0.0, 0.0, name));
    }
    testing::equivalence::remove_shared_dir(dir, world());
  }
}

// serial (2 steps) -> grid 2,1,2 (2 more) -> serial (2 more): the losses and parameters of the
// uninterrupted serial run, whose tensors have the serial shapes throughout.
TEST(Graph3DResume, SerialToGridToSerial) {
  if (world().size() != 4) GTEST_SKIP() << "runs on 4 ranks";
  for (const ResumeCase& k : kResumeCases) {
    SCOPED_TRACE(k.name);
    train::TrainConfig c = resume_config(k);
    c.steps = 6;
    train::Trainer straight(c, true);
    const GcnRun want = run(straight);

    const std::string serial_dir = testing::equivalence::fresh_shared_dir("loom_gcn3d_from_serial_" + k.name, world());
    const std::string grid_dir = testing::equivalence::fresh_shared_dir("loom_gcn3d_from_grid_" + k.name, world());
    {  // each rank trains the serial run alone; rank 0 saves it
      train::TrainConfig first = c;
      first.steps = 2;
      first.out_dir = world().rank() == 0 ? serial_dir : "";
      train::Trainer saver(first, true);
      run(saver);
      if (world().rank() == 0) saver.save_checkpoint_now();
    }
    world().barrier();
    {
      train::TrainConfig middle = c;
      middle.steps = 4;
      middle.tp_3d = "2,1,2";
      middle.resume = serial_dir;
      middle.out_dir = grid_dir;
      train::Trainer grid(middle, true, &world());
      ASSERT_EQ(grid.step(), 2);
      const GcnRun got = run(grid);
      EXPECT_TRUE(testing::all_close(got.losses, std::vector<float>(want.losses.begin() + 2, want.losses.begin() + 4),
                                     1e-5, 0, "grid after the serial checkpoint"));
      grid.save_checkpoint_now();
    }
    train::TrainConfig last = c;
    last.resume = grid_dir;
    train::Trainer resumed(last, true);
    ASSERT_EQ(resumed.step(), 4);
    const GcnRun got = run(resumed);
    EXPECT_TRUE(testing::all_close(got.losses, std::vector<float>(want.losses.begin() + 4, want.losses.end()), 1e-5, 0,
                                   "serial after the grid checkpoint"));
    for (const auto& [name, w] : want.params) {
      ASSERT_EQ(got.params.at(name).shape(), w.shape()) << name;
      EXPECT_TRUE(close_unpadded(got.params.at(name), w, 1e-4, "serial after the grid checkpoint " + name));
    }
    testing::equivalence::remove_shared_dir(grid_dir, world());
    testing::equivalence::remove_shared_dir(serial_dir, world());
  }
}

}  // namespace
}  // namespace loom::parallel::graph3d
