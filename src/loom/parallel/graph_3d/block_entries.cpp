#include "loom/parallel/graph_3d/block_entries.hpp"

#include <algorithm>

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
  // Per distinct layer: the row and column positions' orders and the parts they split into.
  struct Cut {
    const std::vector<int64_t>* row_position;
    const std::vector<int64_t>* col_position;
    int64_t depth_parts, outer_parts;
    std::vector<int64_t>* counts;
    void keep(int64_t n, int64_t u, int64_t v) const {
      const int64_t d = part_of(n, depth_parts, (*row_position)[static_cast<size_t>(u)]);
      const int64_t o = part_of(n, outer_parts, (*col_position)[static_cast<size_t>(v)]);
      ++(*counts)[static_cast<size_t>(d * outer_parts + o)];
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
    cuts.push_back(Cut{&orders.position[l % 2], &orders.position[(l + 1) % 2], depth, outer,
                       &out.counts[static_cast<size_t>(l)]});
  }
  source.for_each_edge([&](int64_t s, int64_t d) {
    out.digest.add(s, d);
    for (const Cut& cut : cuts) cut.keep(N, s, d), cut.keep(N, d, s);
  });
  for (int64_t i = 0; i < N; ++i)
    for (const Cut& cut : cuts) cut.keep(N, i, i);
  return out;
}

}  // namespace loom::parallel::graph3d
