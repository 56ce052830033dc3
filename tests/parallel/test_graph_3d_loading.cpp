// Plexus's point at load time: on a 3D grid no rank holds the whole graph's structure. A
// rank reads the edges once, streamed, and keeps only its layers' blocks of Â
// (graph_3d/local_adjacency.hpp): the spec keeps no edge list and no whole Â, each block
// equals the one cut from the whole Â bit for bit (so the grid trains as before), and the
// graph's identity is the whole graph's. Likewise the node data: a rank reads the features
// streamed and keeps its first layer's shard alone, and the targets of its last layer's rows
// alone, each equal to the one cut from the whole. A bad edge or node file fails every rank
// with its file and line; an error on one rank alone fails the others too, naming it, instead
// of a hang in the degrees' sum or the next collective. The memory check counts what a rank
// holds of the graph (GcnMemoryNeed, on 1 rank too).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "comm/mpi_test_env.hpp"
#include "loom/comm/device_mesh.hpp"
#include "loom/data/graph.hpp"
#include "loom/error.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/kernels/sparse.hpp"
#include "loom/nn/gcn.hpp"
#include "loom/parallel/graph_3d/block_entries.hpp"
#include "loom/parallel/graph_3d/class_parallel_loss.hpp"
#include "loom/parallel/graph_3d/graph_conv_3d.hpp"
#include "loom/parallel/graph_3d/local_adjacency.hpp"
#include "loom/parallel/graph_3d/local_features.hpp"
#include "loom/tensor/memory_tracker.hpp"
#include "loom/train/gcn_spec.hpp"
#include "loom/train/trainer.hpp"
#include "parallel/equivalence.hpp"
#include "test_util.hpp"

namespace loom::parallel::graph3d {
namespace {

using loom::testing::world;

train::TrainConfig gcn_config(const std::string& data, int64_t layers) {
  train::TrainConfig c;
  c.family = "gcn";
  c.data = data;
  c.gcn.layers = layers;
  c.gcn.hidden = 8;
  c.steps = 1;
  c.threads = 1;
  c.log_every = 100;
  c.eval_every = 0;
  c.checkpoint_every = 0;
  c.out_dir = "";
  return c;
}

std::string grid_for(int size) { return size == 8 ? "2,2,2" : "2,1,2"; }

TEST(Graph3DLoading, EachRankHoldsOnlyItsBlocksOfA) {
  if (world().size() != 4 && world().size() != 8) GTEST_SKIP() << "runs on 4 or 8 ranks";
  // Three layers: every rotation of the axes' roles, both node orders.
  train::TrainConfig c = gcn_config("rmat:scale=9,edge_factor=8,features=6,classes=3,seed=5", 3);
  c.tp_3d = grid_for(world().size());
  train::Trainer t(c, true, &world());
  auto& spec = dynamic_cast<train::GcnSpec&>(t.spec());
  EXPECT_TRUE(spec.graph().src.empty() && spec.graph().dst.empty());
  EXPECT_EQ(spec.structure_bytes(), 0);

  // The whole graph and Â, read here only to compare with.
  const data::Graph whole = data::load_graph(c.data, c.split);
  const kernels::CsrMatrix A = kernels::gcn_normalized_adjacency(whole.num_nodes, whole.src, whole.dst);
  EXPECT_EQ(spec.data_identity(), whole.identity());
  EXPECT_EQ(spec.plan_shape().nnz, A.nnz());
  const auto orders = node_orders(whole.num_nodes, c.graph_permute, static_cast<uint64_t>(c.seed));
  const auto& model = dynamic_cast<nn::GCN&>(*t.parallelized().chunks.front());
  int64_t held = 0;
  for (size_t l = 0; l < model.convs().size(); ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    const auto& conv = dynamic_cast<const GraphConv3D&>(*model.convs()[l]);
    const Roles r = conv.roles();
    const auto [r0, r1] = part_range(A.rows, conv.grid().size(r.depth), conv.grid().rank(r.depth));
    const auto [c0, c1] = part_range(A.rows, conv.grid().size(r.outer), conv.grid().rank(r.outer));
    const std::vector<int64_t>& rows = orders->rows_of(static_cast<int64_t>(l));
    const kernels::CsrMatrix want = adjacency_block(A, {rows.begin() + r0, rows.begin() + r1},
                                                    orders->column_positions_of(static_cast<int64_t>(l)), c0, c1);
    const kernels::CsrMatrix& got = conv.block();
    EXPECT_EQ(got.rows, want.rows);
    EXPECT_EQ(got.cols, want.cols);
    EXPECT_EQ(got.row_ptr, want.row_ptr);
    EXPECT_EQ(got.col, want.col);
    EXPECT_EQ(got.val, want.val);  // bit for bit
    // Its share of Â: one of the layer's depth x outer blocks (the permutation evens them out
    // to within a few percent on R-MAT; 1.5 leaves room).
    const int64_t blocks = conv.grid().size(r.depth) * conv.grid().size(r.outer);
    EXPECT_GT(got.nnz(), 0);
    EXPECT_LE(got.nnz() * blocks, A.nnz() * 3 / 2) << got.nnz() << " of " << A.nnz() << " non-zeros, " << blocks
                                                   << " blocks";
    held += csr_bytes(got);
  }
  // Reading the whole graph held its edges, Â and Âᵀ; the blocks are a fraction of that.
  const int64_t whole_bytes = static_cast<int64_t>(16 * whole.src.size()) + 2 * csr_bytes(A);
  EXPECT_LT(2 * held, whole_bytes) << "held " << held << " bytes of blocks";
}

TEST(Graph3DLoading, ABadEdgeFileFailsEveryRankNamingFileAndLine) {
  if (world().size() != 4) GTEST_SKIP() << "runs on 4 ranks";
  const std::string dir = testing::equivalence::fresh_shared_dir("loom_graph3d_bad_edges", world());
  const std::string prefix = dir + "/g";
  if (world().rank() == 0) {
    std::filesystem::create_directories(dir);
    std::ofstream(prefix + ".features") << "1 0\n0 1\n1 1\n0 0\n";
    std::ofstream(prefix + ".labels") << "0 train\n1 val\n0 test\n1 train\n";
    std::ofstream(prefix + ".edges") << "0 1\n1 2\n2 7\n";
  }
  world().barrier();
  train::TrainConfig c = gcn_config(prefix, 2);
  c.tp_3d = "2,1,2";
  EXPECT_EQ(testing::error_of([&] { train::Trainer t(c, true, &world()); }),
            prefix + ".edges:3: node 7 is out of range: the graph has 4 nodes (0..3)");
  testing::equivalence::remove_shared_dir(dir, world());
}

// A source whose edges (or, read again, its features) fail on one rank only (as running out of
// memory, or a file changed between the reads, would).
class FailingOnOneRank : public data::GraphSource {
 public:
  explicit FailingOnOneRank(int failing_rank, bool in_features = false)
      : failing_rank_(failing_rank), in_features_(in_features) {
    nodes_.name = in_features ? "graph-y" : "graph-x";
    nodes_.num_nodes = 16;
    nodes_.num_features = 2;
  }
  void for_each_edge(const std::function<void(int64_t, int64_t)>& edge) override {
    for (int64_t i = 0; i + 1 < 16; ++i) edge(i, i + 1);
    if (!in_features_ && world().rank() == failing_rank_) fail("graph-x: out of memory on this rank");
  }
  void read_feature_rows(const std::function<bool(int64_t)>& wanted,
                         const std::function<void(int64_t, const float*)>& row) override {
    const float values[2] = {1.0f, 2.0f};
    for (int64_t i = 0; i < 16; ++i)
      if (wanted(i)) row(i, values);
    if (in_features_ && world().rank() == failing_rank_) fail("graph-y.features:9: changed since it was opened");
  }

 private:
  int failing_rank_;
  bool in_features_;
};

TEST(Graph3DLoading, AnErrorOnOneRankFailsEveryRankBeforeTheDegreeSum) {
  if (world().size() != 4) GTEST_SKIP() << "runs on 4 ranks";
  comm::DeviceMesh mesh(world(), {{"depth", 2}, {"row", 2}, {"col", 1}});
  const tp3d::Grid3D grid(mesh.group("row"), mesh.group("col"), mesh.group("depth"));
  const auto orders = node_orders(16, true, 1);
  FailingOnOneRank source(2);
  data::EdgeDigest digest;
  const std::string error = testing::error_of([&] { read_local_adjacency(source, grid, *orders, 2, digest); });
  if (world().rank() == 2)
    EXPECT_EQ(error, "graph-x: out of memory on this rank");
  else
    EXPECT_EQ(error, "grid rank " + std::to_string(2) + " failed reading the edges of graph-x (its error says why); "
                     "this rank read them without one");
  // And with no error every rank reads its blocks (the sums run on all of them).
  FailingOnOneRank fine(-1);
  data::EdgeDigest d2;
  const LocalAdjacency local = read_local_adjacency(fine, grid, *orders, 2, d2);
  EXPECT_EQ(local.nnz, 15 * 2 + 16);
  EXPECT_EQ(d2.count(), 15);
}

// A path of 16 nodes whose edges stream one fewer each time (a file changed between the count
// at open and the read into the blocks).
class Shrinking : public data::GraphSource {
 public:
  Shrinking() {
    nodes_.name = "graph-z";
    nodes_.num_nodes = 16;
    nodes_.num_features = 2;
  }
  void for_each_edge(const std::function<void(int64_t, int64_t)>& edge) override {
    for (int64_t i = 0; i + 1 < 16 - streams_; ++i) edge(i, i + 1);
    ++streams_;
  }

 private:
  int64_t streams_ = 0;
};

// The count at open digests the edges (the graph's identity) and the read into the blocks
// takes its digest: valid while the read streams as many edges, which it checks, failing every
// rank with the file's name when it does not.
TEST(Graph3DLoading, TheReadTakesTheCountsDigestOfTheSameEdges) {
  if (world().size() != 4) GTEST_SKIP() << "runs on 4 ranks";
  comm::DeviceMesh mesh(world(), {{"depth", 2}, {"row", 2}, {"col", 1}});
  const tp3d::Grid3D grid(mesh.group("row"), mesh.group("col"), mesh.group("depth"));
  const auto orders = node_orders(16, true, 1);
  FailingOnOneRank path(-1);  // the same 15 edges every time
  const BlockEntries counted = count_block_entries(path, {2, 1, 2}, *orders, 2);
  data::EdgeDigest digest;
  const LocalAdjacency local = read_local_adjacency(path, grid, *orders, 2, digest, &counted);
  std::vector<int64_t> src, dst;
  for (int64_t i = 0; i + 1 < 16; ++i) src.push_back(i), dst.push_back(i + 1);
  EXPECT_EQ(digest.count(), 15);
  EXPECT_EQ(digest.crc(), data::EdgeDigest::of(src, dst).crc());
  EXPECT_EQ(local.nnz, 15 * 2 + 16);

  Shrinking shrinking;
  const BlockEntries counted_15 = count_block_entries(shrinking, {2, 1, 2}, *orders, 2);
  data::EdgeDigest d2;
  EXPECT_EQ(testing::error_of([&] { read_local_adjacency(shrinking, grid, *orders, 2, d2, &counted_15); }),
            "graph-z: 14 edges, but 15 when they were counted (changed since it was opened)");
}

// The grid's batch of `split` equals the whole graph's features (normalised by row) and
// targets cut as its first and last layers take them.
void expect_node_blocks_cut_from_the_whole(const train::TrainConfig& c, data::NodeSplit split) {
  MemoryTracker& tracker = MemoryTracker::instance();
  tracker.reset_peaks();
  const int64_t held_before = tracker.total_current();
  train::Trainer t(c, true, &world());
  const int64_t peak_while_loading = tracker.total_peak() - held_before;
  auto& spec = dynamic_cast<train::GcnSpec&>(t.spec());
  const data::Batch mine = split == data::NodeSplit::Train ? spec.train_batch(0, 0, 0) : spec.eval_batch(0, 0);
  data::Graph whole = data::load_graph(c.data, c.split);
  const int64_t N = whole.num_nodes, F = whole.num_features;
  const std::string identity = whole.identity();  // of the graph as read
  data::row_normalize_features(whole);
  Tensor features = Tensor::empty({N, F}), targets = Tensor::empty({N}, DType::I32);
  std::copy(whole.features.begin(), whole.features.end(), features.f32());
  for (int64_t i = 0; i < N; ++i)
    targets.i32()[i] = whole.split[static_cast<size_t>(i)] == split ? whole.labels[static_cast<size_t>(i)] : -1;
  const auto& model = dynamic_cast<nn::GCN&>(*t.parallelized().chunks.front());
  const auto& first = dynamic_cast<const GraphConv3D&>(*model.convs().front());
  const Tensor want_inputs = first.input_shard(features);
  ASSERT_EQ(mine.inputs.shape(), want_inputs.shape());
  EXPECT_EQ(std::memcmp(mine.inputs.raw(), want_inputs.raw(), static_cast<size_t>(want_inputs.nbytes())), 0)
      << "the features' shard differs from the one cut from the whole matrix";
  const Tensor want_targets = targets_for(*model.convs().back(), targets);
  ASSERT_EQ(mine.targets.shape(), want_targets.shape());
  EXPECT_EQ(std::memcmp(mine.targets.raw(), want_targets.raw(), static_cast<size_t>(want_targets.nbytes())), 0);

  // What the rank holds of the nodes: its shard and its rows' targets, no whole matrix or labels.
  EXPECT_TRUE(spec.graph().features.empty());
  EXPECT_TRUE(spec.graph().labels.empty());
  EXPECT_LT(2 * mine.inputs.numel(), N * F) << "holds " << mine.inputs.numel() << " of " << N * F << " features";
  // Nor did it while the model was built (every tensor it made, the model's included).
  EXPECT_LT(peak_while_loading, N * F * static_cast<int64_t>(sizeof(float)))
      << "a peak of " << peak_while_loading << " tensor bytes while loading";
  EXPECT_LE(2 * mine.targets.numel(), N);  // its part over the last layer's depth axis
  EXPECT_EQ(spec.data_identity(), identity);  // a checkpoint's graph identity as before
}

TEST(Graph3DLoading, EachRankHoldsOnlyItsNodeBlocks) {
  if (world().size() != 4 && world().size() != 8) GTEST_SKIP() << "runs on 4 or 8 ranks";
  for (const std::string& data : {std::string("rmat:scale=9,edge_factor=8,features=40,classes=3,seed=5"),
                                 std::string(LOOM_SOURCE_DIR "/data/cora")}) {
    SCOPED_TRACE(data);
    train::TrainConfig c = gcn_config(data, 3);
    c.tp_3d = grid_for(world().size());
    expect_node_blocks_cut_from_the_whole(c, data::NodeSplit::Train);
    c.graph_permute = false;
    expect_node_blocks_cut_from_the_whole(c, data::NodeSplit::Val);
  }
}

// What a GCN's memory check (and `loom train --dry-run`) counts of the graph is what a rank
// holds once the model is built: serially the whole features and Â (with Âᵀ), on a grid the
// rank's shard of the features, its layers' blocks of Â and the per-node arrays every rank
// keeps. Predicted as parallelize's check asks, before build() reads the edges into the blocks
// (GcnSpec::data_need), and measured from the built rank's tensors and arrays
// (GcnSpec::data_held): equal but for a grid's blocks of Â, which the entries counted into each
// at open bound from above, equal to them on a graph that lists no edge twice.
std::string bytes_of(const train::GraphDataBytes& b) {
  return "features " + std::to_string(b.features) + ", nodes " + std::to_string(b.nodes) + ", Â " +
         std::to_string(b.adjacency) + ", total " + std::to_string(b.total());
}

// A text graph of 60 nodes that lists each of its edges once, in one direction, and no self-loop.
void write_distinct_edges_graph(const std::string& prefix) {
  std::ofstream features(prefix + ".features"), labels(prefix + ".labels"), edges(prefix + ".edges");
  for (int i = 0; i < 60; ++i) {
    features << (i % 3) << " " << (i % 5) << " " << (i % 7 == 0) << "\n";
    labels << (i % 4) << " " << (i < 20 ? "train" : i < 40 ? "val" : "test") << "\n";
    for (int j = i + 1; j < 60; ++j)
      if ((i * 31 + j * 17) % 9 == 0) edges << i << " " << j << "\n";
  }
}

TEST(GcnMemoryNeed, PredictsTheGraphDataTheBuiltRankHolds) {
  const int ranks = world().size();
  if (ranks != 1 && ranks != 4 && ranks != 8) GTEST_SKIP() << "runs on 1, 4 or 8 ranks";
  const std::string grid = ranks == 1 ? "" : ranks == 4 ? "2,2,1" : "2,2,2";
  const std::string dir = testing::equivalence::fresh_shared_dir("loom_gcn_memory_need", world());
  const std::string distinct = dir + "/distinct", binary = dir + "/distinct.lgraph";
  if (world().rank() == 0) {
    std::filesystem::create_directories(dir);
    write_distinct_edges_graph(distinct);
    data::write_binary_graph(data::load_graph(distinct, ""), binary);  // the same graph, streamed from the binary
  }
  world().barrier();
  for (const std::string& data : {std::string(LOOM_SOURCE_DIR "/data/cora"), distinct, binary,
                                  std::string("rmat:scale=10,edge_factor=8,features=64,classes=4,seed=3")}) {
    SCOPED_TRACE(data + " on " + (grid.empty() ? "one rank" : grid));
    for (const int64_t layers : {2, 3}) {
      SCOPED_TRACE(std::to_string(layers) + " layers");
      train::TrainConfig c = gcn_config(data, layers);
      c.tp_3d = grid;
      // As parallelize's memory check sees it: the spec made, the model not built (on a grid no
      // edge read into a block yet).
      train::TrainConfig before_config = c;
      const train::GcnSpec before(before_config);
      train::Trainer t(c, true, &world());
      const auto& spec = dynamic_cast<const train::GcnSpec&>(t.spec());
      const std::array<int64_t, 3> at = spec.position();
      const train::GraphDataBytes predicted = before.data_need(at), held = spec.data_held();
      std::printf("[gcn memory] rank %d at (%lld,%lld,%lld) %s, %lld layers: predicted %s | held %s\n", world().rank(),
                  static_cast<long long>(at[0]), static_cast<long long>(at[1]), static_cast<long long>(at[2]),
                  data.c_str(), static_cast<long long>(layers), bytes_of(predicted).c_str(), bytes_of(held).c_str());
      // The features' shard and the per-node arrays depend on the sizes alone: exact (and the
      // copies let go are gone: the features as read, the edges, a grid rank's whole labels).
      EXPECT_EQ(predicted.features, held.features);
      EXPECT_EQ(predicted.nodes, held.nodes);
      // memory.json's entry: this rank's prediction and what it holds.
      EXPECT_EQ(spec.data_bytes().predicted, spec.data_need(at).total());
      EXPECT_EQ(spec.data_bytes().held, held.total());
      // The memory check counts the grid position holding the most.
      EXPECT_EQ(before.memory_need().total(), before.memory_need_at(before.largest_position()).total());
      EXPECT_GE(before.memory_need().total(), before.memory_need_at(at).total());
      if (grid.empty()) {
        EXPECT_EQ(predicted.adjacency, held.adjacency);  // the whole Â's non-zeros, counted when it was built
        EXPECT_TRUE(before.adjacency_exact());
        continue;
      }
      // Once built, a grid rank's per-node arrays are the split, its layers' lists of nodes and
      // its rows' targets: no N-long node orders (the layers keep their lists, not the orders).
      const auto& model = dynamic_cast<nn::GCN&>(*t.parallelized().chunks.front());
      int64_t lists = 0;
      for (const nn::GraphConv* conv : model.convs()) lists += dynamic_cast<const GraphConv3D&>(*conv).node_list_bytes();
      const data::Batch batch = const_cast<train::GcnSpec&>(spec).eval_batch(0, 0);
      EXPECT_EQ(held.nodes, spec.graph().num_nodes + lists + 3 * batch.targets.nbytes());
      // A grid's blocks: at most the entries counted into them at open (duplicates fold).
      EXPECT_LE(held.adjacency, predicted.adjacency);
      EXPECT_FALSE(before.adjacency_exact());  // unknown before the blocks are read
      EXPECT_EQ(spec.data_need(at).total(), predicted.total());  // counted once, at open
      if (data == distinct || data == binary) {  // nothing to fold: exact
        EXPECT_EQ(held.adjacency, predicted.adjacency);
        EXPECT_TRUE(spec.adjacency_exact());
      } else if (data.find("cora") != std::string::npos) {
        // Cora's 5429 cites hold 5278 distinct links: the bound is 2.3% over Â's non-zeros.
        EXPECT_LE(predicted.adjacency, held.adjacency * 21 / 20);
        EXPECT_FALSE(spec.adjacency_exact());
      }
    }
  }
  testing::equivalence::remove_shared_dir(dir, world());
}

// A grid rank's model state is its weight and bias shards (with gradients, AdamW's moments and,
// under bf16, each W shard's bf16 copy), and what its forward keeps its activation shards: the
// formulas (memory_need, activation_bytes) equal the tracker's, in fp32 and bf16.
TEST(GcnMemoryNeed, GridRankStateAndActivationsEqualTheTrackers) {
  const int ranks = world().size();
  if (ranks != 4 && ranks != 8) GTEST_SKIP() << "runs on 4 or 8 ranks";
  MemoryTracker& m = MemoryTracker::instance();
  const auto state_now = [&] {
    return m.current(MemoryCategory::Parameters) + m.current(MemoryCategory::Gradients) +
           m.current(MemoryCategory::OptimizerState);
  };
  for (const std::string& grid : ranks == 4 ? std::vector<std::string>{"2,2,1", "1,2,2"} : std::vector<std::string>{"2,2,2"})
    for (const std::string precision : {"fp32", "bf16"}) {
      SCOPED_TRACE(grid + " " + precision);
      train::TrainConfig c = gcn_config(LOOM_SOURCE_DIR "/data/cora", 3);
      c.gcn.hidden = 7;  // padded on every split axis
      c.tp_3d = grid;
      c.precision = precision;
      const int64_t state0 = state_now();
      train::Trainer t(c, true, &world());
      t.train_step();  // the gradients, the moments and the bf16 copies exist
      auto& spec = dynamic_cast<train::GcnSpec&>(t.spec());
      const train::MemoryNeed need = spec.memory_need_at(spec.position());
      EXPECT_EQ(static_cast<double>(state_now() - state0), need.state);
      EXPECT_EQ(spec.memory_need().state, need.state);  // the same shards on every rank
      EXPECT_EQ(static_cast<double>(t.state_formula().total()), need.state);

      nn::Module& chunk = *t.parallelized().chunks.front();
      const data::Batch batch = spec.train_batch(1, 0, 0);
      const kernels::PrecisionScope in_precision(kernels::parse_precision(precision));  // as a step runs it
      MemoryScope scope(MemoryCategory::Activations);
      const int64_t activations0 = m.current(MemoryCategory::Activations);
      nn::Context ctx;
      const Tensor logits = chunk.forward(batch.inputs, ctx);
      const int64_t kept = m.current(MemoryCategory::Activations) - activations0;
      std::printf("[gcn memory] rank %d %s %s: state %lld, activations %lld (formula %lld)\n", world().rank(),
                  grid.c_str(), precision.c_str(), static_cast<long long>(state_now() - state0),
                  static_cast<long long>(kept), static_cast<long long>(spec.activation_bytes(chunk)));
      EXPECT_EQ(kept, spec.activation_bytes(chunk));
      EXPECT_EQ(static_cast<double>(kept), need.activations);
    }
}

TEST(Graph3DLoading, ABadNodeFileFailsEveryRankNamingFileAndLine) {
  if (world().size() != 4) GTEST_SKIP() << "runs on 4 ranks";
  const std::string dir = testing::equivalence::fresh_shared_dir("loom_graph3d_bad_nodes", world());
  const std::string prefix = dir + "/g";
  train::TrainConfig c = gcn_config(prefix, 2);
  c.tp_3d = "2,1,2";
  const auto error_with = [&](const std::string& features, const std::string& labels) {
    world().barrier();
    if (world().rank() == 0) {
      std::filesystem::create_directories(dir);
      std::ofstream(prefix + ".features") << features;
      std::ofstream(prefix + ".labels") << labels;
      std::ofstream(prefix + ".edges") << "0 1\n1 2\n2 3\n";
    }
    world().barrier();
    return testing::error_of([&] { train::Trainer t(c, true, &world()); });
  };
  const std::string labels = "0 train\n1 val\n0 test\n1 train\n";
  // A row that only some ranks' shards hold: every rank still names it.
  EXPECT_EQ(error_with("1 0\n0 1\n1 x\n0 0\n", labels), prefix + ".features:3: feature must be a finite number, got 'x'");
  EXPECT_EQ(error_with("1 0\n0 1\n1 1\n0\n", labels), prefix + ".features:4: 1 feature values, expected 2 (as on line 1)");
  EXPECT_EQ(error_with("1 0\n0 1\n1 1\n0 0\n", "0 train\n1 val\n0 tset\n1 train\n"),
            prefix + ".labels:3: split must be train, val, test or none, got 'tset'");
  testing::equivalence::remove_shared_dir(dir, world());
}

TEST(Graph3DLoading, AFeatureErrorOnOneRankFailsEveryRank) {
  if (world().size() != 4) GTEST_SKIP() << "runs on 4 ranks";
  comm::DeviceMesh mesh(world(), {{"depth", 2}, {"row", 2}, {"col", 1}});
  const tp3d::Grid3D grid(mesh.group("row"), mesh.group("col"), mesh.group("depth"));
  const auto orders = node_orders(16, true, 1);
  for (const int failing : {1, -1}) {
    FailingOnOneRank source(failing, /*in_features=*/true);
    data::EdgeDigest digest;
    LocalAdjacency local = read_local_adjacency(source, grid, *orders, 1, digest);
    const GraphConv3D first(2, 4, 0, 16, std::move(local.blocks[0]), false, grid, *orders);
    const auto keep = [](float*, int64_t) {};
    const std::string error = testing::error_of([&] { read_input_shard(first, source, keep); });
    if (failing < 0)
      EXPECT_EQ(error, "(no error)");
    else if (world().rank() == failing)
      EXPECT_EQ(error, "graph-y.features:9: changed since it was opened");
    else
      EXPECT_EQ(error, "grid rank " + std::to_string(failing) + " failed reading the features of graph-y (its error "
                       "says why); this rank read them without one");
  }
}

}  // namespace
}  // namespace loom::parallel::graph3d
