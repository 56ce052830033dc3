// SpMM and the GCN's normalised adjacency against dense references: Â from its definition
// D^-1/2 (A + I) D^-1/2 on a small graph with a duplicate edge and a self-loop; SpMM and its
// transpose on an R-MAT graph (skewed rows) against a dense product in double (rtol 1e-6:
// fp32 sums of at most a few hundred terms), bit-identical for 1 and 2 threads (each row
// is one thread's sum in column order); the row split balanced by non-zeros; dropout masks.
#include <gtest/gtest.h>

#include <cmath>

#include "loom/data/rmat.hpp"
#include "loom/kernels/dropout.hpp"
#include "loom/kernels/spmm.hpp"
#include "loom/kernels/threads.hpp"
#include "test_util.hpp"

namespace loom::kernels {
namespace {

TEST(Spmm, NormalizedAdjacencyFollowsItsDefinition) {
  // 4 nodes: 0-1 twice (once each way), 1-2, a self-loop on 3.
  const CsrMatrix a = gcn_normalized_adjacency(4, {0, 1, 1, 3}, {1, 0, 2, 3});
  const std::vector<double> degree = {2, 3, 2, 1};  // of A + I
  std::vector<float> want(16, 0.0f);
  const int edges[][2] = {{0, 1}, {1, 0}, {1, 2}, {2, 1}, {0, 0}, {1, 1}, {2, 2}, {3, 3}};
  for (const auto& e : edges) want[static_cast<size_t>(e[0] * 4 + e[1])] = static_cast<float>(1.0 / std::sqrt(degree[e[0]] * degree[e[1]]));
  EXPECT_TRUE(testing::all_close(csr_to_dense(a), want, 1e-6, 0.0, "Â"));
  EXPECT_EQ(a.nnz(), 8);
}

CsrMatrix rmat_adjacency() {
  data::RmatOptions o;
  o.scale = 9;
  o.edge_factor = 8;
  o.features = 1;
  const data::Graph g = data::make_rmat_graph(o);
  return gcn_normalized_adjacency(g.num_nodes, g.src, g.dst);
}

// C (rows, D) = A B in double from the dense A.
std::vector<float> dense_product(const CsrMatrix& A, const std::vector<float>& B, int64_t D) {
  const std::vector<float> a = csr_to_dense(A);
  std::vector<float> c(static_cast<size_t>(A.rows * D));
  for (int64_t i = 0; i < A.rows; ++i)
    for (int64_t d = 0; d < D; ++d) {
      double s = 0.0;
      for (int64_t k = 0; k < A.cols; ++k) s += static_cast<double>(a[static_cast<size_t>(i * A.cols + k)]) * B[static_cast<size_t>(k * D + d)];
      c[static_cast<size_t>(i * D + d)] = static_cast<float>(s);
    }
  return c;
}

TEST(Spmm, MatchesTheDenseProductAndItsTranspose) {
  CsrMatrix A = rmat_adjacency();
  // Make it unsymmetric so the transpose is a different matrix.
  for (size_t k = 0; k < A.val.size(); ++k) A.val[k] *= 1.0f + 0.01f * static_cast<float>(k % 7);
  const CsrMatrix At = csr_transpose(A);
  for (const int64_t D : {1, 16, 37}) {
    const std::vector<float> B = testing::random_vector(A.cols * D, 3);
    std::vector<float> C(static_cast<size_t>(A.rows * D));
    spmm(A, B.data(), C.data(), D);
    EXPECT_TRUE(testing::all_close(C, dense_product(A, B, D), 1e-5, 1e-6, "A B, D " + std::to_string(D)));
    spmm(At, B.data(), C.data(), D);
    EXPECT_TRUE(testing::all_close(C, dense_product(At, B, D), 1e-5, 1e-6, "Aᵀ B, D " + std::to_string(D)));
    std::vector<float> acc(C.size(), 1.0f);
    spmm(At, B.data(), acc.data(), D, /*accumulate=*/true);
    for (size_t i = 0; i < C.size(); ++i) C[i] += 1.0f;
    EXPECT_TRUE(testing::all_close(acc, C, 1e-6, 1e-6, "accumulate"));
  }
}

TEST(Spmm, BitIdenticalForAnyThreadCount) {
  const CsrMatrix A = rmat_adjacency();
  const int64_t D = 64;
  const std::vector<float> B = testing::random_vector(A.cols * D, 4);
  testing::expect_deterministic_across_threads(
      [&] {
        std::vector<float> C(static_cast<size_t>(A.rows * D));
        spmm(A, B.data(), C.data(), D);
        return C;
      },
      0.0, 0.0);
}

// A range of rows at a time (a blocked aggregation) writes exactly what the whole product
// writes there and nothing on either side of the range (where another range's sum may be in
// flight), at any thread count.
TEST(Spmm, RowRangesAreTheWholeProductsRowsBitForBit) {
  const CsrMatrix A = rmat_adjacency();
  const int64_t D = 24;
  const std::vector<float> B = testing::random_vector(A.cols * D, 5);
  std::vector<float> whole(static_cast<size_t>(A.rows * D));
  spmm(A, B.data(), whole.data(), D);
  testing::expect_deterministic_across_threads(
      [&] {
        std::vector<float> ranges(whole.size());
        const std::vector<int64_t> cuts{0, 1, A.rows / 3, A.rows / 3, A.rows - 1, A.rows};  // an empty range too
        for (size_t i = 0; i + 1 < cuts.size(); ++i) {
          const int64_t r0 = cuts[i], r1 = cuts[i + 1];
          std::vector<float> C(whole.size(), -7.0f);
          spmm_rows(A, B.data(), C.data(), D, r0, r1);
          for (int64_t e = 0; e < A.rows * D; ++e) {
            const auto at = static_cast<size_t>(e);
            if (e >= r0 * D && e < r1 * D) {
              ranges[at] = C[at];
            } else {
              EXPECT_EQ(C[at], -7.0f) << "row " << e / D << " outside [" << r0 << ", " << r1 << ")";
            }
          }
        }
        EXPECT_TRUE(testing::all_close(ranges, whole, 0.0, 0.0, "ranges against the whole"));
        return ranges;
      },
      0.0, 0.0);
}

TEST(Spmm, RowsBalancedByNonZeros) {
  const CsrMatrix A = rmat_adjacency();
  int64_t longest = 0;
  for (int64_t r = 0; r < A.rows; ++r) longest = std::max(longest, A.row_ptr[static_cast<size_t>(r + 1)] - A.row_ptr[static_cast<size_t>(r)]);
  for (const int parts : {1, 2, 3, 8}) {
    const std::vector<int64_t> b = rows_balanced_by_nnz(A, parts);
    ASSERT_EQ(b.size(), static_cast<size_t>(parts + 1));
    EXPECT_EQ(b.front(), 0);
    EXPECT_EQ(b.back(), A.rows);
    for (int p = 0; p < parts; ++p) {
      const int64_t nnz = A.row_ptr[static_cast<size_t>(b[static_cast<size_t>(p + 1)])] - A.row_ptr[static_cast<size_t>(b[static_cast<size_t>(p)])];
      EXPECT_LE(nnz, A.nnz() / parts + longest) << "part " << p << " of " << parts;
    }
  }
}

TEST(Dropout, KeyedMasksKeepOneMinusPScaled) {
  const int64_t n = 1 << 16;
  const std::vector<float> x(static_cast<size_t>(n), 2.0f);
  std::vector<float> out(static_cast<size_t>(n)), mask(static_cast<size_t>(n)), again(static_cast<size_t>(n));
  dropout_forward(out.data(), mask.data(), x.data(), n, 0.5f, dropout_key(1, 3, 0));
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    kept += mask[static_cast<size_t>(i)] != 0.0f ? 1 : 0;
    EXPECT_EQ(out[static_cast<size_t>(i)], mask[static_cast<size_t>(i)] != 0.0f ? 4.0f : 0.0f);
  }
  EXPECT_NEAR(static_cast<double>(kept) / n, 0.5, 0.01);
  set_num_threads(2);
  dropout_forward(again.data(), mask.data(), x.data(), n, 0.5f, dropout_key(1, 3, 0));
  set_num_threads(1);
  EXPECT_EQ(again, out);  // the same key: the same mask, whatever the threads
  dropout_forward(again.data(), mask.data(), x.data(), n, 0.5f, dropout_key(1, 4, 0));
  EXPECT_NE(again, out);  // the next step: another mask
}

}  // namespace
}  // namespace loom::kernels
