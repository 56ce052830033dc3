// Where the nodes of a graph lie on a Plexus-style 3D grid (Mukhopadhyay et al., "Plexus"):
// each layer splits Â's rows (the nodes it outputs) into contiguous ranges over one grid axis
// and its columns (the nodes it reads) over another, in two node orders. With the double
// random permutation, even layers read in order P2 and write in order P1, odd layers the
// reverse, so a layer's output rows are already the next layer's input rows and nothing is
// redistributed; the random orders spread a power-law graph's hubs over the blocks, so
// every rank gets about the same number of non-zeros. Without it both orders are 0..N-1.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "loom/kernels/sparse.hpp"

namespace loom::parallel::graph3d {

struct NodeOrders {
  // order[k][p]: the node at position p of order k; position[k][node]: its inverse.
  std::vector<int64_t> order[2], position[2];
  // Order 0 (P1) is the output rows of even layers; order 1 (P2) their input rows (the features').
  const std::vector<int64_t>& rows_of(int64_t layer) const { return order[layer % 2]; }
  const std::vector<int64_t>& columns_of(int64_t layer) const { return order[(layer + 1) % 2]; }
  const std::vector<int64_t>& column_positions_of(int64_t layer) const { return position[(layer + 1) % 2]; }
  // Bytes the four N-long arrays hold (32 a node), drawn or the identity.
  int64_t bytes() const;
};

// Two random permutations drawn from seed (the same on every rank), or the identity twice.
std::shared_ptr<const NodeOrders> node_orders(int64_t N, bool permute, uint64_t seed);

// Part k of [0, n) split into `parts` contiguous ranges as evenly as possible: [begin, end).
std::pair<int64_t, int64_t> part_range(int64_t n, int64_t parts, int64_t k);
// The part k whose range part_range(n, parts, k) holds position p (0 <= p < n).
int64_t part_of(int64_t n, int64_t parts, int64_t p);

// part_of(n, parts, p) for one n and parts and many p, as a pass over every edge asks it:
// floor(((p + 1) parts - 1) / n) estimated with a multiply by 1 / n (within one of it: the
// quotient is below parts < 2^31, the double's error below parts 2^-51) and corrected by
// comparing products, never divided (an integer division a call was most of its cost).
class PartOf {
 public:
  PartOf(int64_t n, int64_t parts);
  int64_t operator()(int64_t p) const {
    const int64_t q = (p + 1) * parts_ - 1;
    int64_t k = static_cast<int64_t>(static_cast<double>(q) * inverse_n_);
    if (k * n_ > q) --k;
    if ((k + 1) * n_ <= q) ++k;
    return k;
  }
  int64_t parts() const { return parts_; }

 private:
  int64_t n_, parts_;
  double inverse_n_;
};

// The block of A with the rows row_nodes (in that order) and the columns at positions
// [c0, c1) of an order whose inverse is col_position (local column j: position c0 + j).
kernels::CsrMatrix adjacency_block(const kernels::CsrMatrix& A, const std::vector<int64_t>& row_nodes,
                                   const std::vector<int64_t>& col_position, int64_t c0, int64_t c1);

// Non-zeros of the row_parts x col_parts blocks of layer `layer`'s Â in the given orders:
// max / mean, the load imbalance Plexus reports (1 = perfectly even).
double block_imbalance(const kernels::CsrMatrix& A, const NodeOrders& orders, int64_t layer, int64_t row_parts,
                       int64_t col_parts);

}  // namespace loom::parallel::graph3d
