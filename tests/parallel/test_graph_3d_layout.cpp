// The Plexus layout's pure parts: the node orders (seeded permutations), the blocks of Â
// (together exactly Â, for any grid), the load balance the permutation buys on an R-MAT graph
// of 2^16 nodes on 8 ranks (max / mean non-zeros per rank below 1.1; the file order's printed
// next to it), and the planner's ranking of grids.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <numeric>

#include "loom/data/rmat.hpp"
#include "loom/parallel/graph_3d/node_layout.hpp"
#include "loom/plan/gcn_cost.hpp"

namespace loom::parallel::graph3d {
namespace {

kernels::CsrMatrix rmat_adjacency(int64_t scale, int64_t edge_factor) {
  data::RmatOptions o;
  o.scale = scale;
  o.edge_factor = edge_factor;
  o.features = 1;
  const data::Graph g = data::make_rmat_graph(o);
  return kernels::gcn_normalized_adjacency(g.num_nodes, g.src, g.dst);
}

TEST(Graph3DLayout, OrdersArePermutationsDrawnFromTheSeed) {
  const auto a = node_orders(1000, true, 7), b = node_orders(1000, true, 7), c = node_orders(1000, true, 8);
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(a->order[k], b->order[k]);
    std::vector<int64_t> sorted = a->order[k];
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> identity(1000);
    std::iota(identity.begin(), identity.end(), int64_t{0});
    EXPECT_EQ(sorted, identity);
    for (int64_t p = 0; p < 1000; ++p) EXPECT_EQ(a->position[k][static_cast<size_t>(a->order[k][static_cast<size_t>(p)])], p);
  }
  EXPECT_NE(a->order[0], a->order[1]);  // two orders: P1 for rows, P2 for columns
  EXPECT_NE(a->order[0], c->order[0]);
  EXPECT_EQ(node_orders(5, false, 7)->order[1], (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

// PartOf (a multiply and two corrections, for the count pass over every edge) is part_of,
// the part whose range holds the position: every position of small sizes, and the positions
// around each boundary of sizes up to 2^31 - 1 nodes and 2^40 (where a double's estimate of
// the quotient is the furthest from it).
TEST(Graph3DLayout, PartOfIsThePartWhoseRangeHoldsThePosition) {
  for (int64_t n = 1; n <= 130; ++n)
    for (int64_t parts = 1; parts <= 17; ++parts) {
      const PartOf part(n, parts);
      for (int64_t k = 0; k < parts; ++k) {
        const auto [begin, end] = part_range(n, parts, k);
        for (int64_t p = begin; p < end; ++p) ASSERT_EQ(part(p), k) << n << " nodes, " << parts << " parts, position " << p;
      }
    }
  for (const int64_t n : {int64_t{131071}, int64_t{1} << 30, (int64_t{1} << 31) - 1, (int64_t{1} << 40) + 7})
    for (const int64_t parts : {2, 3, 7, 8, 63, 1000, 65535}) {
      const PartOf part(n, parts);
      for (int64_t k = 0; k < parts; ++k) {
        const auto [begin, end] = part_range(n, parts, k);
        for (const int64_t p : {begin, begin + 1, end - 2, end - 1})
          if (p >= begin && p < end) {
            ASSERT_EQ(part(p), k) << n << " nodes, " << parts << " parts, position " << p;
            ASSERT_EQ(part(p), part_of(n, parts, p));
          }
      }
    }
}

TEST(Graph3DLayout, BlocksTogetherAreTheAdjacency) {
  const kernels::CsrMatrix A = rmat_adjacency(6, 4);
  const std::vector<float> dense = kernels::csr_to_dense(A);
  const int64_t N = A.rows;
  for (const bool permute : {false, true})
    for (const auto& [row_parts, col_parts] : {std::pair<int64_t, int64_t>{3, 2}, {1, 5}, {100, 1}}) {
      const auto orders = node_orders(N, permute, 3);
      std::vector<float> rebuilt(static_cast<size_t>(N * N), 0.0f);
      for (int64_t rp = 0; rp < row_parts; ++rp)
        for (int64_t cp = 0; cp < col_parts; ++cp) {
          const auto rows = part_range(N, row_parts, rp), cols = part_range(N, col_parts, cp);
          const std::vector<int64_t> row_nodes(orders->rows_of(1).begin() + rows.first, orders->rows_of(1).begin() + rows.second);
          const kernels::CsrMatrix b = adjacency_block(A, row_nodes, orders->column_positions_of(1), cols.first, cols.second);
          const std::vector<float> local = kernels::csr_to_dense(b);
          for (int64_t i = 0; i < b.rows; ++i)
            for (int64_t j = 0; j < b.cols; ++j)
              rebuilt[static_cast<size_t>(row_nodes[static_cast<size_t>(i)] * N +
                                          orders->columns_of(1)[static_cast<size_t>(cols.first + j)])] +=
                  local[static_cast<size_t>(i * b.cols + j)];
        }
      EXPECT_EQ(rebuilt, dense) << row_parts << " x " << col_parts << (permute ? " permuted" : "");
    }
}

TEST(Graph3DLayout, PermutationBalancesRmat2To16OnEightRanks) {
  const kernels::CsrMatrix A = rmat_adjacency(16, 8);
  // Layer 0's blocks: rows over depth, columns over row (outer); 2x2x2 has 4 distinct blocks.
  for (const auto& [depth, outer] : {std::pair<int64_t, int64_t>{2, 2}, {8, 1}, {1, 8}}) {
    const double permuted = block_imbalance(A, *node_orders(A.rows, true, 1), 0, depth, outer);
    const double file_order = block_imbalance(A, *node_orders(A.rows, false, 1), 0, depth, outer);
    std::cout << "[imbalance] R-MAT 2^16, " << depth << " x " << outer << " blocks: file order " << file_order
              << ", permuted " << permuted << "\n";
    EXPECT_LT(permuted, 1.1);
    EXPECT_GE(file_order, 1.0);
  }
}

TEST(Graph3DLayout, PlannerRanksEveryGridAndCountsNothingOnOneRank) {
  const plan::GcnShape s{.N = 1 << 18, .nnz = 9 << 18, .F = 128, .H = 128, .K = 16, .L = 3};
  const std::vector<plan::GcnGridCost> grids = plan::rank_gcn_grids(s, 8, 10.0, 100.0);
  EXPECT_EQ(grids.size(), 10u);  // the ordered factorisations of 8 into three
  for (size_t i = 1; i < grids.size(); ++i) EXPECT_LE(grids[i - 1].seconds(), grids[i].seconds());
  const plan::Grid3DBytes one = plan::gcn_3d_bytes_per_epoch(s, 1, 1, 1);
  EXPECT_EQ(one.row + one.col + one.depth, 0);
  // Depth alone: only the weights' gradients, the logits and the input gradients cross it.
  const plan::Grid3DBytes d = plan::gcn_3d_bytes_per_epoch(s, 1, 1, 2);
  EXPECT_EQ(d.row + d.col, 0);
  EXPECT_GT(d.depth, 0);
  // Memory: no rank holds the whole Â (each its layers' blocks); the features, blocks and
  // activations shrinking with the grid, the node orders (32 bytes a node) and split not.
  const int64_t graph_bytes = 2 * (8 * (s.N + 1) + 8 * s.nnz);
  const int64_t serial = plan::gcn_3d_memory_bytes(s, 1, 1, 1), grid = plan::gcn_3d_memory_bytes(s, 2, 2, 2);
  EXPECT_GT(serial - 33 * s.N, 3 * (grid - 33 * s.N));
  EXPECT_GT(serial, s.L * graph_bytes);  // one block of each layer, the whole Â and Âᵀ
}

}  // namespace
}  // namespace loom::parallel::graph3d
