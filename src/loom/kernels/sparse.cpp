#include "loom/kernels/sparse.hpp"

#include <algorithm>
#include <cmath>

#include "loom/error.hpp"

namespace loom::kernels {

CsrMatrix gcn_normalized_adjacency(int64_t N, const std::vector<int64_t>& src, const std::vector<int64_t>& dst) {
  check(N > 0 && N < (int64_t{1} << 31), "a graph needs 1..2^31-1 nodes, got ", N);
  check(src.size() == dst.size(), "edge lists of different lengths: ", src.size(), " vs ", dst.size());
  // Both directions of every edge plus the self-loops, then sorted and deduplicated.
  std::vector<std::pair<int32_t, int32_t>> entries;
  entries.reserve(2 * src.size() + static_cast<size_t>(N));
  for (size_t e = 0; e < src.size(); ++e) {
    check(src[e] >= 0 && src[e] < N && dst[e] >= 0 && dst[e] < N, "edge ", e, " (", src[e], " -> ", dst[e],
          ") names a node outside 0..", N - 1);
    entries.emplace_back(static_cast<int32_t>(src[e]), static_cast<int32_t>(dst[e]));
    entries.emplace_back(static_cast<int32_t>(dst[e]), static_cast<int32_t>(src[e]));
  }
  for (int64_t i = 0; i < N; ++i) entries.emplace_back(static_cast<int32_t>(i), static_cast<int32_t>(i));
  std::sort(entries.begin(), entries.end());
  entries.erase(std::unique(entries.begin(), entries.end()), entries.end());

  CsrMatrix a;
  a.rows = a.cols = N;
  a.row_ptr.assign(static_cast<size_t>(N + 1), 0);
  a.col.reserve(entries.size());
  for (const auto& [r, c] : entries) {
    ++a.row_ptr[static_cast<size_t>(r) + 1];
    a.col.push_back(c);
  }
  for (int64_t i = 0; i < N; ++i) a.row_ptr[static_cast<size_t>(i + 1)] += a.row_ptr[static_cast<size_t>(i)];
  // Symmetric, so a row's length is the node's degree in A + I (at least 1: the self-loop).
  std::vector<float> inv_sqrt_degree(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i)
    inv_sqrt_degree[static_cast<size_t>(i)] = static_cast<float>(
        1.0 / std::sqrt(static_cast<double>(a.row_ptr[static_cast<size_t>(i + 1)] - a.row_ptr[static_cast<size_t>(i)])));
  a.val.resize(a.col.size());
  for (int64_t i = 0; i < N; ++i)
    for (int64_t k = a.row_ptr[static_cast<size_t>(i)]; k < a.row_ptr[static_cast<size_t>(i + 1)]; ++k)
      a.val[static_cast<size_t>(k)] =
          inv_sqrt_degree[static_cast<size_t>(i)] * inv_sqrt_degree[static_cast<size_t>(a.col[static_cast<size_t>(k)])];
  return a;
}

CsrMatrix csr_transpose(const CsrMatrix& a) {
  CsrMatrix t;
  t.rows = a.cols;
  t.cols = a.rows;
  t.row_ptr.assign(static_cast<size_t>(t.rows + 1), 0);
  for (int32_t c : a.col) ++t.row_ptr[static_cast<size_t>(c) + 1];
  for (int64_t i = 0; i < t.rows; ++i) t.row_ptr[static_cast<size_t>(i + 1)] += t.row_ptr[static_cast<size_t>(i)];
  t.col.resize(a.col.size());
  t.val.resize(a.val.size());
  std::vector<int64_t> next(t.row_ptr.begin(), t.row_ptr.end() - 1);
  // Rows of a in increasing order: each row of t gets its columns in increasing order.
  for (int64_t r = 0; r < a.rows; ++r)
    for (int64_t k = a.row_ptr[static_cast<size_t>(r)]; k < a.row_ptr[static_cast<size_t>(r + 1)]; ++k) {
      const int64_t slot = next[static_cast<size_t>(a.col[static_cast<size_t>(k)])]++;
      t.col[static_cast<size_t>(slot)] = static_cast<int32_t>(r);
      t.val[static_cast<size_t>(slot)] = a.val[static_cast<size_t>(k)];
    }
  return t;
}

CsrMatrix dense_to_csr(const float* x, int64_t rows, int64_t cols) {
  CsrMatrix a;
  a.rows = rows;
  a.cols = cols;
  a.row_ptr.assign(static_cast<size_t>(rows + 1), 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      if (x[r * cols + c] != 0.0f) {
        a.col.push_back(static_cast<int32_t>(c));
        a.val.push_back(x[r * cols + c]);
      }
    a.row_ptr[static_cast<size_t>(r + 1)] = a.nnz();
  }
  return a;
}

std::vector<float> csr_to_dense(const CsrMatrix& a) {
  std::vector<float> d(static_cast<size_t>(a.rows * a.cols), 0.0f);
  for (int64_t r = 0; r < a.rows; ++r)
    for (int64_t k = a.row_ptr[static_cast<size_t>(r)]; k < a.row_ptr[static_cast<size_t>(r + 1)]; ++k)
      d[static_cast<size_t>(r * a.cols + a.col[static_cast<size_t>(k)])] += a.val[static_cast<size_t>(k)];
  return d;
}

}  // namespace loom::kernels
