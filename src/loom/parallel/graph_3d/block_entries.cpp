#include "loom/parallel/graph_3d/block_entries.hpp"

#include <algorithm>

#include "loom/parallel/graph_3d/edge_positions.hpp"
#include "loom/parallel/graph_3d/graph_conv_3d.hpp"

namespace loom::parallel::graph3d {

int64_t BlockEntries::of(int64_t layer, const std::array<int64_t, 3>& at) const {
  const auto l = static_cast<size_t>(layer % kDistinctBlockLayers);
  const Roles r = Roles::of(layer);
  return counts[l][static_cast<size_t>(at[static_cast<size_t>(r.depth)] * outer_parts[l] +
                                       at[static_cast<size_t>(r.outer)])];
}

BlockEntries count_block_entries(data::GraphSource& source, const std::array<int64_t, 3>& sizes,
                                 const NodeOrders& orders, int64_t layers) {
  const int64_t N = source.nodes().num_nodes;
  // Per distinct layer: which order its rows take (its columns take the other), the parts its
  // rows and columns split into, and its counts.
  struct Cut {
    int row_order;
    PartOf depth, outer;
    int64_t* counts;
    // The entry (u, v), given u's and v's positions in both orders.
    void keep(const OrderPositions& u_at, const OrderPositions& v_at) const {
      ++counts[depth(u_at[row_order]) * outer.parts() + outer(v_at[1 - row_order])];
    }
  };
  BlockEntries out;
  const int64_t distinct = std::min(layers, kDistinctBlockLayers);
  out.counts.resize(static_cast<size_t>(distinct));
  std::vector<Cut> cuts;
  for (int64_t l = 0; l < distinct; ++l) {
    const Roles r = Roles::of(l);
    const int64_t depth = sizes[static_cast<size_t>(r.depth)], outer = sizes[static_cast<size_t>(r.outer)];
    out.counts[static_cast<size_t>(l)].assign(static_cast<size_t>(depth * outer), 0);
    out.outer_parts.push_back(outer);
    cuts.push_back(Cut{static_cast<int>(l % 2), PartOf(N, depth), PartOf(N, outer), out.counts[static_cast<size_t>(l)].data()});
  }
  // Each end's positions looked up once an edge (not once a layer and direction), a batch at a time.
  EdgePositions batch(orders, [&cuts](const OrderPositions& s_at, const OrderPositions& d_at) {
    for (const Cut& cut : cuts) cut.keep(s_at, d_at), cut.keep(d_at, s_at);
  });
  source.for_each_edge([&](int64_t s, int64_t d) { out.digest.add(s, d), batch.add(s, d); });
  batch.flush();
  for (int64_t i = 0; i < N; ++i) {
    const OrderPositions i_at = positions_of(orders, i);
    for (const Cut& cut : cuts) cut.keep(i_at, i_at);
  }
  return out;
}

}  // namespace loom::parallel::graph3d
