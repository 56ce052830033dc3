#include "loom/parallel/graph_3d/node_layout.hpp"

#include <algorithm>
#include <numeric>
#include <random>

#include "loom/error.hpp"

namespace loom::parallel::graph3d {

namespace {

// Fisher-Yates with the engine's raw output, so every standard library draws the same order.
std::vector<int64_t> random_order(int64_t N, std::mt19937_64& rng) {
  std::vector<int64_t> order(static_cast<size_t>(N));
  std::iota(order.begin(), order.end(), int64_t{0});
  for (int64_t i = N - 1; i > 0; --i)
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(rng() % static_cast<uint64_t>(i + 1))]);
  return order;
}

}  // namespace

int64_t NodeOrders::bytes() const {
  size_t n = 0;
  for (int k = 0; k < 2; ++k) n += order[k].capacity() + position[k].capacity();
  return static_cast<int64_t>(n * sizeof(int64_t));
}

std::shared_ptr<const NodeOrders> node_orders(int64_t N, bool permute, uint64_t seed) {
  auto o = std::make_shared<NodeOrders>();
  std::mt19937_64 rng(seed ^ 0x9E3779B97F4A7C15ull);
  for (int k = 0; k < 2; ++k) {
    if (permute) {
      o->order[k] = random_order(N, rng);
    } else {
      o->order[k].resize(static_cast<size_t>(N));
      std::iota(o->order[k].begin(), o->order[k].end(), int64_t{0});
    }
    o->position[k].resize(static_cast<size_t>(N));
    for (int64_t p = 0; p < N; ++p) o->position[k][static_cast<size_t>(o->order[k][static_cast<size_t>(p)])] = p;
  }
  return o;
}

std::pair<int64_t, int64_t> part_range(int64_t n, int64_t parts, int64_t k) {
  check(parts >= 1 && k >= 0 && k < parts, "part ", k, " of ", parts, " parts");
  return {n * k / parts, n * (k + 1) / parts};
}

int64_t part_of(int64_t n, int64_t parts, int64_t p) {
  // The largest k with part_range(n, parts, k).first = floor(n k / parts) <= p.
  return std::min(parts - 1, ((p + 1) * parts - 1) / std::max<int64_t>(n, 1));
}

PartOf::PartOf(int64_t n, int64_t parts)
    : n_(std::max<int64_t>(n, 1)), parts_(parts), inverse_n_(1.0 / static_cast<double>(n_)) {
  // The estimate's error is below parts 2^-51 < 1/2; no product of the correction overflows.
  check(parts >= 1 && parts < (int64_t{1} << 31) && n_ < (int64_t{1} << 62) / parts, "PartOf(", n, ", ", parts,
        "): needs 1 <= parts < 2^31 and n parts < 2^62");
}

kernels::CsrMatrix adjacency_block(const kernels::CsrMatrix& A, const std::vector<int64_t>& row_nodes,
                                   const std::vector<int64_t>& col_position, int64_t c0, int64_t c1) {
  kernels::CsrMatrix b;
  b.rows = static_cast<int64_t>(row_nodes.size());
  b.cols = c1 - c0;
  b.row_ptr.assign(1, 0);
  std::vector<std::pair<int32_t, float>> row;
  for (int64_t u : row_nodes) {
    row.clear();
    for (int64_t e = A.row_ptr[static_cast<size_t>(u)]; e < A.row_ptr[static_cast<size_t>(u) + 1]; ++e) {
      const int64_t p = col_position[static_cast<size_t>(A.col[static_cast<size_t>(e)])];
      if (p >= c0 && p < c1) row.emplace_back(static_cast<int32_t>(p - c0), A.val[static_cast<size_t>(e)]);
    }
    std::sort(row.begin(), row.end());
    for (const auto& [c, v] : row) b.col.push_back(c), b.val.push_back(v);
    b.row_ptr.push_back(b.nnz());
  }
  return b;
}

double block_imbalance(const kernels::CsrMatrix& A, const NodeOrders& orders, int64_t layer, int64_t row_parts,
                       int64_t col_parts) {
  const int64_t N = A.rows;
  const std::vector<int64_t>& rows = orders.rows_of(layer);
  const std::vector<int64_t>& col_position = orders.column_positions_of(layer);
  std::vector<int64_t> counts(static_cast<size_t>(row_parts * col_parts), 0);
  for (int64_t r = 0; r < N; ++r) {
    const int64_t u = rows[static_cast<size_t>(r)], rp = part_of(N, row_parts, r);
    for (int64_t e = A.row_ptr[static_cast<size_t>(u)]; e < A.row_ptr[static_cast<size_t>(u) + 1]; ++e)
      ++counts[static_cast<size_t>(rp * col_parts +
                                   part_of(N, col_parts, col_position[static_cast<size_t>(A.col[static_cast<size_t>(e)])]))];
  }
  const double total = static_cast<double>(A.nnz());
  if (total == 0.0) return 1.0;
  const double most = static_cast<double>(*std::max_element(counts.begin(), counts.end()));
  return most / (total / static_cast<double>(counts.size()));
}

}  // namespace loom::parallel::graph3d
