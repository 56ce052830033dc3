#include "loom/parallel/graph_3d/local_adjacency.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <exception>
#include <utility>

#include "loom/error.hpp"
#include "loom/parallel/graph_3d/edge_positions.hpp"
#include "loom/parallel/graph_3d/graph_conv_3d.hpp"
#include "loom/parallel/graph_3d/read_agreement.hpp"

namespace loom::parallel::graph3d {

using tp3d::Axis;

namespace {

// One layer's block as it is being read: the order its rows take (its columns take the
// other), its rows' and columns' ranges of positions and the (row, column) pairs, local to the
// block, that fell in it: each one 64-bit key, the row in the high half, so that sorting the
// keys (one comparison each, not a pair's two) sorts the pairs.
struct Cut {
  int row_order;
  int64_t r0, r1, c0, c1;
  std::vector<uint64_t> entries;
  static int64_t row(uint64_t entry) { return static_cast<int64_t>(entry >> 32); }
  static int32_t col(uint64_t entry) { return static_cast<int32_t>(entry & 0xffffffffu); }

  // The entry (u, v), given u's and v's positions in both orders.
  void keep(const OrderPositions& u_at, const OrderPositions& v_at) {
    const int64_t r = u_at[static_cast<size_t>(row_order)];
    if (r < r0 || r >= r1) return;
    const int64_t c = v_at[static_cast<size_t>(1 - row_order)];
    if (c >= c0 && c < c1) entries.push_back(static_cast<uint64_t>(r - r0) << 32 | static_cast<uint64_t>(c - c0));
  }
};

}  // namespace

int64_t csr_bytes(const kernels::CsrMatrix& a) {
  return static_cast<int64_t>(a.row_ptr.size() * sizeof(int64_t) + a.col.size() * sizeof(int32_t) +
                              a.val.size() * sizeof(float));
}

int64_t LocalAdjacency::bytes() const {
  int64_t b = 0;
  for (const kernels::CsrMatrix& block : blocks) b += csr_bytes(block);
  return b;
}

LocalAdjacency read_local_adjacency(data::GraphSource& source, const tp3d::Grid3D& grid, const NodeOrders& orders,
                                    int64_t layers, data::EdgeDigest& digest, const BlockEntries* counted) {
  const int64_t N = source.nodes().num_nodes;
  check(N > 0 && N < (int64_t{1} << 31), "a graph needs 1..2^31-1 nodes, got ", N);
  std::vector<Cut> cuts;
  for (int64_t l = 0; l < std::min(layers, kDistinctBlockLayers); ++l) {
    const Roles r = Roles::of(l);
    const auto [r0, r1] = part_range(N, grid.size(r.depth), grid.rank(r.depth));
    const auto [c0, c1] = part_range(N, grid.size(r.outer), grid.rank(r.outer));
    cuts.push_back(Cut{static_cast<int>(l % 2), r0, r1, c0, c1, {}});
  }
  std::exception_ptr failed;
  try {
    // Each block's entries reserved, exactly when counted before, else its expected share when
    // the source knows its edges: growing by doubling would leave up to twice the block's bytes
    // at the peak.
    if (counted != nullptr) {
      const std::array<int64_t, 3> at{grid.rank(Axis::Row), grid.rank(Axis::Col), grid.rank(Axis::Depth)};
      for (int64_t l = 0; l < static_cast<int64_t>(cuts.size()); ++l)
        cuts[static_cast<size_t>(l)].entries.reserve(static_cast<size_t>(counted->of(l, at)));
    } else if (const int64_t E = source.known_edges(); E >= 0)
      for (int64_t l = 0; l < static_cast<int64_t>(cuts.size()); ++l) {
        const Roles r = Roles::of(l);
        const int64_t blocks = grid.size(r.depth) * grid.size(r.outer);
        cuts[static_cast<size_t>(l)].entries.reserve(static_cast<size_t>((2 * E + N) / blocks * 11 / 10));
      }
    // Both directions of every edge and the self-loops, as gcn_normalized_adjacency takes them.
    EdgePositions keep(orders, [&cuts](const OrderPositions& s_at, const OrderPositions& d_at) {
      for (Cut& cut : cuts) cut.keep(s_at, d_at), cut.keep(d_at, s_at);
    });
    if (counted != nullptr) {  // digested by the count: only counted again, against it
      int64_t edges = 0;
      source.for_each_edge([&](int64_t s, int64_t d) { ++edges, keep.add(s, d); });
      keep.flush();
      check(edges == counted->digest.count(), source.nodes().name, ": ", edges, " edges, but ",
            counted->digest.count(), " when they were counted (changed since it was opened)");
      digest = counted->digest;
    } else {
      source.for_each_edge([&](int64_t s, int64_t d) { digest.add(s, d), keep.add(s, d); });
      keep.flush();
    }
    for (int64_t i = 0; i < N; ++i) {
      const OrderPositions i_at = positions_of(orders, i);
      for (Cut& cut : cuts) cut.keep(i_at, i_at);
    }
    for (Cut& cut : cuts) {
      std::sort(cut.entries.begin(), cut.entries.end());
      cut.entries.erase(std::unique(cut.entries.begin(), cut.entries.end()), cut.entries.end());
    }
  } catch (...) {
    failed = std::current_exception();
  }
  // Before the sums below, which a failed rank would leave the others waiting in.
  agree_on_read(grid, failed, "the edges of " + source.nodes().name);

  // Degrees in A + I: layer 0's block rows' distinct non-zeros, counted once per block (by its
  // first inner rank), summed over the grid. In two floats (count / 4096 and count % 4096) so
  // every sum stays an integer below 2^24, exact, for any N < 2^31.
  std::vector<float> degree(static_cast<size_t>(2 * N), 0.0f);
  if (grid.rank(Roles::of(0).inner) == 0) {
    const Cut& cut = cuts.front();
    std::vector<int64_t> row_count(static_cast<size_t>(cut.r1 - cut.r0), 0);
    for (const uint64_t e : cut.entries) ++row_count[static_cast<size_t>(Cut::row(e))];
    const std::vector<int64_t>& rows = orders.rows_of(0);
    for (int64_t r = 0; r < cut.r1 - cut.r0; ++r) {
      const int64_t n = row_count[static_cast<size_t>(r)], u = rows[static_cast<size_t>(cut.r0 + r)];
      degree[static_cast<size_t>(2 * u)] = static_cast<float>(n / 4096);
      degree[static_cast<size_t>(2 * u + 1)] = static_cast<float>(n % 4096);
    }
  }
  reduce_over_grid(grid, degree, comm::ReduceOp::Sum);
  LocalAdjacency out;
  out.nodes = N;
  std::vector<float> inv_sqrt_degree(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) {
    const int64_t d = static_cast<int64_t>(degree[static_cast<size_t>(2 * i)]) * 4096 +
                      static_cast<int64_t>(degree[static_cast<size_t>(2 * i + 1)]);
    out.nnz += d;
    inv_sqrt_degree[static_cast<size_t>(i)] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  }
  decltype(degree)().swap(degree);  // released, not just emptied (`= {}` keeps the capacity)

  out.blocks.reserve(static_cast<size_t>(layers));
  for (int64_t l = 0; l < static_cast<int64_t>(cuts.size()); ++l) {
    Cut& cut = cuts[static_cast<size_t>(l)];
    const std::vector<int64_t>&rows = orders.rows_of(l), &cols = orders.columns_of(l);
    kernels::CsrMatrix b;
    b.rows = cut.r1 - cut.r0;
    b.cols = cut.c1 - cut.c0;
    b.row_ptr.assign(static_cast<size_t>(b.rows + 1), 0);
    b.col.reserve(cut.entries.size());
    b.val.reserve(cut.entries.size());
    for (const uint64_t e : cut.entries) {
      const int64_t r = Cut::row(e);
      const int32_t c = Cut::col(e);
      ++b.row_ptr[static_cast<size_t>(r) + 1];
      b.col.push_back(c);
      b.val.push_back(inv_sqrt_degree[static_cast<size_t>(rows[static_cast<size_t>(cut.r0 + r)])] *
                      inv_sqrt_degree[static_cast<size_t>(cols[static_cast<size_t>(cut.c0 + c)])]);
    }
    for (int64_t r = 0; r < b.rows; ++r) b.row_ptr[static_cast<size_t>(r + 1)] += b.row_ptr[static_cast<size_t>(r)];
    decltype(cut.entries)().swap(cut.entries);  // this block's edges are in b now: released
    out.blocks.push_back(std::move(b));
  }
  for (int64_t l = kDistinctBlockLayers; l < layers; ++l)
    out.blocks.push_back(out.blocks[static_cast<size_t>(l % kDistinctBlockLayers)]);

  // Plexus's load imbalance: the largest block's non-zeros over the mean (max / mean).
  std::vector<float> most(static_cast<size_t>(layers));
  for (int64_t l = 0; l < layers; ++l)
    most[static_cast<size_t>(l)] = static_cast<float>(out.blocks[static_cast<size_t>(l)].nnz());
  reduce_over_grid(grid, most, comm::ReduceOp::Max);
  for (int64_t l = 0; l < layers; ++l) {
    const Roles r = Roles::of(l);
    const double blocks = static_cast<double>(grid.size(r.depth)) * static_cast<double>(grid.size(r.outer));
    out.imbalance.push_back(static_cast<double>(most[static_cast<size_t>(l)]) / (static_cast<double>(out.nnz) / blocks));
  }
  return out;
}

}  // namespace loom::parallel::graph3d
