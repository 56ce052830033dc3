// What a GCN's memory check (and `loom train --dry-run`) counts of the graph is what a rank
// holds once the model is built: serially the whole features and Â (with Âᵀ), on a 3D grid
// the rank's shard of the features, its layers' blocks of Â and the per-node arrays every
// rank keeps. Predicted as parallelize's check asks, before any edge is read (GcnSpec::
// data_need), and measured from the built rank's tensors and arrays (GcnSpec::data_held):
// equal where the prediction is exact; a grid's blocks of Â within the stated bound.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

#include "comm/mpi_test_env.hpp"
#include "loom/nn/gcn.hpp"
#include "loom/parallel/graph_3d/graph_conv_3d.hpp"
#include "loom/train/gcn_spec.hpp"
#include "loom/train/trainer.hpp"
#include "test_util.hpp"

namespace loom::train {
namespace {

using loom::testing::world;
using parallel::tp3d::Axis;

TrainConfig gcn_config(const std::string& data, const std::string& tp_3d) {
  TrainConfig c;
  c.family = "gcn";
  c.data = data;
  c.gcn.layers = 2;
  c.gcn.hidden = 16;
  c.steps = 1;
  c.threads = 1;
  c.log_every = 100;
  c.eval_every = 0;
  c.checkpoint_every = 0;
  c.out_dir = "";
  c.tp_3d = tp_3d;
  return c;
}

std::string bytes_of(const GraphDataBytes& b) {
  return "features " + std::to_string(b.features) + ", nodes " + std::to_string(b.nodes) + ", Â " +
         std::to_string(b.adjacency) + ", total " + std::to_string(b.total());
}

TEST(GcnMemoryNeed, PredictsTheGraphDataTheBuiltRankHolds) {
  const int ranks = world().size();
  if (ranks != 1 && ranks != 4 && ranks != 8) GTEST_SKIP() << "runs on 1, 4 or 8 ranks";
  const std::string grid = ranks == 1 ? "" : ranks == 4 ? "2,2,1" : "2,2,2";
  for (const std::string data : {std::string(LOOM_SOURCE_DIR "/data/cora"),
                                 std::string("rmat:scale=10,edge_factor=8,features=64,classes=4,seed=3")}) {
    SCOPED_TRACE(data + " on " + (grid.empty() ? "one rank" : grid));
    TrainConfig c = gcn_config(data, grid);
    // As parallelize's memory check sees it: the spec made, the model not built (on a grid no
    // edge read yet).
    TrainConfig before_config = c;
    const GcnSpec before(before_config);
    Trainer t(c, true, &world());
    const auto& spec = dynamic_cast<const GcnSpec&>(t.spec());
    std::array<int64_t, 3> at{0, 0, 0};
    const auto& model = dynamic_cast<nn::GCN&>(*t.parallelized().chunks.front());
    if (const auto* conv = dynamic_cast<const parallel::graph3d::GraphConv3D*>(model.convs().front()))
      for (const Axis a : {Axis::Row, Axis::Col, Axis::Depth}) at[static_cast<size_t>(a)] = conv->grid().rank(a);
    const GraphDataBytes predicted = before.data_need(at), held = spec.data_held();
    std::printf("[gcn memory] rank %d at (%lld,%lld,%lld) %s: predicted %s | held %s\n", world().rank(),
                static_cast<long long>(at[0]), static_cast<long long>(at[1]), static_cast<long long>(at[2]),
                data.c_str(), bytes_of(predicted).c_str(), bytes_of(held).c_str());
    // The features' shard and the per-node arrays depend on the sizes alone: exact.
    EXPECT_EQ(predicted.features, held.features);
    EXPECT_EQ(predicted.nodes, held.nodes);
    // The memory check counts grid position (0, 0, 0)'s, the largest of every part.
    EXPECT_EQ(before.memory_need().data, static_cast<double>(before.data_need().total()));
    EXPECT_GE(before.data_need().features + before.data_need().nodes, predicted.features + predicted.nodes);
    if (grid.empty()) {
      EXPECT_EQ(predicted.adjacency, held.adjacency);  // the whole Â's non-zeros, counted when it was built
      EXPECT_TRUE(before.block_nnz_estimate(1).exact);
      continue;
    }
    // A grid's blocks: before the edges are read, the even share of 2E + N non-zeros (R-MAT
    // knows E) bounds the blocks from above, its duplicates folded; or of the N self-loops
    // (a text file's edges are not counted before they are read) from below.
    EXPECT_FALSE(before.block_nnz_estimate(4).exact);
    if (data.rfind("rmat:", 0) == 0) EXPECT_LE(held.adjacency, predicted.adjacency);
    else EXPECT_GE(held.adjacency, predicted.adjacency);
    // Once the edges are read the whole Â's count is known (the spec after build): its even
    // share is within the layers' imbalance of the blocks (the random orders keep it to a few
    // percent; 10% here).
    const GraphDataBytes after = spec.data_need(at);
    EXPECT_EQ(after.features + after.nodes, predicted.features + predicted.nodes);
    EXPECT_LE(held.adjacency, after.adjacency * 11 / 10) << bytes_of(after);
    EXPECT_GE(held.adjacency, after.adjacency * 9 / 10) << bytes_of(after);
  }
}

}  // namespace
}  // namespace loom::train
