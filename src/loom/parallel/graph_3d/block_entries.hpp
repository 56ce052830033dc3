// How many entries of Â each block of a Plexus-style 3D grid receives, counted in one streamed
// pass over a graph's edges before any is kept (no edge stored): for every layer with distinct
// blocks (local_adjacency.hpp: layers l and l + 6 share theirs), and every block of the layer's
// depth x outer parts, the entries read_local_adjacency collects there (both directions of
// every edge and every self-loop) before it folds duplicates. So a block's non-zeros are at most
// its count, and equal to it when the source lists no edge twice (in either direction) and no
// self-loop. What the memory check, asked before build() streams the edges into the blocks,
// predicts a rank's blocks of Â from, and what the read reserves for each block. The pass also
// digests the edges (the graph's identity), so the read need not. Nothing more is carried to
// the read: all it could take is the edges or the rank's entries, and either, held from open,
// would be allocated before the memory check that guards them (the edges, 8 bytes or more
// each on every rank, would also sit beside the blocks at the read's peak). Streaming them
// again costs time, not memory (for R-MAT, drawing them again).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "loom/data/graph.hpp"
#include "loom/parallel/graph_3d/node_layout.hpp"

namespace loom::parallel::graph3d {

// Layers l and l + 6 have the same roles (period 3) and node orders (period 2): the same blocks.
constexpr int64_t kDistinctBlockLayers = 6;

struct BlockEntries {
  data::EdgeDigest digest;  // of the edges streamed (count(): E)
  // Per distinct layer: depth_parts x outer_parts counts, the depth part's row first.
  std::vector<std::vector<int64_t>> counts;
  std::vector<int64_t> outer_parts;
  // The entries of layer `layer`'s block at grid position at = {row, col, depth}.
  int64_t of(int64_t layer, const std::array<int64_t, 3>& at) const;
  // 2E + N: every block's entries of one layer together (an upper bound of Â's non-zeros).
  int64_t total(int64_t nodes) const { return 2 * digest.count() + nodes; }
};

// Streams source's edges once. sizes: the grid's {row, col, depth}; layers: the GCN's.
BlockEntries count_block_entries(data::GraphSource& source, const std::array<int64_t, 3>& sizes,
                                 const NodeOrders& orders, int64_t layers);

}  // namespace loom::parallel::graph3d
