// This rank's part of Â on a Plexus-style 3D grid, read from the graph's edges streamed once
// (data::GraphSource) so that no rank holds the whole edge list or the whole Â: each layer's
// block (its depth part of the layer's row order x its outer part of the column order,
// GraphConv3D's roles) keeps an edge, in either direction, only when both ends fall in it.
// Â's normalisation needs each node's degree in A + I over all its edges: the layer-0 blocks
// tile Â once over depth x outer, so each counts the distinct non-zeros of its rows and the
// grid sums the counts (an N-long vector, not the edges). Values and order are those
// adjacency_block cuts from the whole gcn_normalized_adjacency, bit for bit.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/data/graph.hpp"
#include "loom/kernels/sparse.hpp"
#include "loom/parallel/graph_3d/block_entries.hpp"
#include "loom/parallel/graph_3d/node_layout.hpp"
#include "loom/parallel/tensor_parallel_3d/grid.hpp"

namespace loom::parallel::graph3d {

struct LocalAdjacency {
  int64_t nodes = 0;                       // N
  int64_t nnz = 0;                         // the whole Â's non-zeros
  std::vector<kernels::CsrMatrix> blocks;  // per layer: this rank's block (rows x cols)
  std::vector<double> imbalance;           // per layer: block_imbalance of the whole Â
  // Bytes of Â this rank holds: its blocks.
  int64_t bytes() const;
};

// The blocks of `layers` layers over `orders`; every edge also goes to digest (the graph's
// identity). An error reading the edges on any rank fails every rank (the others naming the
// grid rank that failed) before the grid sums the degrees, so none waits in that sum. counted:
// the entries each block receives (block_entries.hpp), when counted before, which each block
// reserves exactly, and the edges' digest the count took (digest becomes it, the edges
// streamed now only counted: as many as then, or the source changed since); else the even
// share of a source's known edges, or nothing.
LocalAdjacency read_local_adjacency(data::GraphSource& source, const tp3d::Grid3D& grid, const NodeOrders& orders,
                                    int64_t layers, data::EdgeDigest& digest, const BlockEntries* counted = nullptr);

// Bytes a CSR matrix holds (row pointers, columns, values).
int64_t csr_bytes(const kernels::CsrMatrix& a);

}  // namespace loom::parallel::graph3d
