// `loom bench graph-balance`, end to end: one JSON line for every 3D grid of each rank count,
// the imbalance of each layer's blocks permuted and in file order equal to graph_3d's
// block_imbalance for that grid and layer, exactly 1 where a layer's blocks are the whole
// matrix, and bad flags refused by name.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "apps/cli_test_util.hpp"
#include "loom/data/graph.hpp"
#include "loom/parallel/graph_3d/node_layout.hpp"

namespace loom::testing {
namespace {

TEST(BenchGraphBalance, OneLinePerGridWithTheLayoutsImbalance) {
  const std::string graph = "rmat:scale=10,edge_factor=8";
  const CommandResult r = run_loom("bench graph-balance --data " + graph + " --ranks 2,4 --layers 3 --seed 5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream lines(r.output);
  std::set<std::string> grids;
  nlohmann::json two_one_two;
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    grids.insert(j["grid"].get<std::string>());
    ASSERT_EQ(j["permuted"].size(), 3u) << line;
    ASSERT_EQ(j["file_order"].size(), 3u) << line;
    for (const auto& v : j["permuted"]) EXPECT_GE(v.get<double>(), 1.0) << line;
    if (j["grid"] == "2,1,2") two_one_two = j;
    // Layer 1 splits Â's rows over col and its columns over depth: whole on 2,1,1 and 4,1,1.
    if (j["grid"] == "2,1,1" || j["grid"] == "4,1,1") {
      EXPECT_EQ(j["permuted"][1].get<double>(), 1.0) << line;
    }
  }
  EXPECT_EQ(grids, (std::set<std::string>{"1,1,2", "1,2,1", "2,1,1", "1,1,4", "1,2,2", "1,4,1", "2,1,2", "2,2,1",
                                          "4,1,1"}));
  // Layer 0: rows over depth (2), columns over row (2); layer 1: rows over col (1), columns
  // over depth (2); layer 2: rows over row (2), columns over col (1).
  const data::Graph g = data::load_graph(graph, "");
  const kernels::CsrMatrix A = kernels::gcn_normalized_adjacency(g.num_nodes, g.src, g.dst);
  const auto permuted = parallel::graph3d::node_orders(A.rows, true, 5);
  const auto file_order = parallel::graph3d::node_orders(A.rows, false, 5);
  const int64_t blocks[3][2] = {{2, 2}, {1, 2}, {2, 1}};
  for (int64_t l = 0; l < 3; ++l) {
    EXPECT_EQ(two_one_two["permuted"][l].get<double>(),
              parallel::graph3d::block_imbalance(A, *permuted, l, blocks[l][0], blocks[l][1])) << "layer " << l;
    EXPECT_EQ(two_one_two["file_order"][l].get<double>(),
              parallel::graph3d::block_imbalance(A, *file_order, l, blocks[l][0], blocks[l][1])) << "layer " << l;
  }
}

TEST(BenchGraphBalance, BadFlagsAreRefused) {
  expect_error("bench graph-balance --data rmat:scale=6 --ranks 0", "--ranks must be >= 1, got 0");
  expect_error("bench graph-balance --data rmat:scale=6 --layers 0", "--layers must be >= 1, got 0");
  expect_error("bench graph-balance --data rmat:scale=6 --layers 65", "--layers must be <= 64 (as gcn_layers), got 65");
  expect_error("bench graph-balance --data rmat:scale=6 --ranks 8,65",
               "--ranks 65 is more ranks than rmat:scale=6 has nodes (64)");
}

}  // namespace
}  // namespace loom::testing
