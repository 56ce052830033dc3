// A pass over a graph's edges that needs both ends' positions in both node orders (the count
// of each block's entries at open, the read of a rank's blocks in the build): the edges come
// one at a time (GraphSource::for_each_edge) and go on in batches, each batch's positions read
// together. The reads are random over four N-long arrays, mostly cache misses from about 2^16
// nodes; issued together they wait together, not one edge after another.
#pragma once

#include <array>
#include <cstdint>
#include <utility>

#include "loom/parallel/graph_3d/node_layout.hpp"

namespace loom::parallel::graph3d {

// A node's position in order 0 and in order 1.
using OrderPositions = std::array<int64_t, 2>;

inline OrderPositions positions_of(const NodeOrders& orders, int64_t u) {
  return {orders.position[0][static_cast<size_t>(u)], orders.position[1][static_cast<size_t>(u)]};
}

// each(src_at, dst_at) for every edge added, in the order added; flush() after the last.
template <class Each>
class EdgePositions {
 public:
  EdgePositions(const NodeOrders& orders, Each each) : orders_(orders), each_(std::move(each)) {}
  void add(int64_t src, int64_t dst) {
    src_[held_] = src, dst_[held_] = dst;
    if (++held_ == kBatch) flush();
  }
  void flush() {
    OrderPositions src_at[kBatch], dst_at[kBatch];
    for (int i = 0; i < held_; ++i) src_at[i] = positions_of(orders_, src_[i]), dst_at[i] = positions_of(orders_, dst_[i]);
    for (int i = 0; i < held_; ++i) each_(src_at[i], dst_at[i]);
    held_ = 0;
  }

 private:
  static constexpr int kBatch = 64;
  const NodeOrders& orders_;
  Each each_;
  int64_t src_[kBatch], dst_[kBatch];
  int held_ = 0;
};

}  // namespace loom::parallel::graph3d
