#include "loom/kernels/spmm.hpp"

#include <omp.h>

#include <algorithm>

namespace loom::kernels {

namespace {
// Below this many multiply-adds a parallel region costs more than it saves.
constexpr int64_t kSpmmParallelMin = 1 << 15;

// The first row of part p of `parts` of rows [r0, r1) (r1 for p == parts): where p / parts
// of their non-zeros have been passed.
int64_t part_begin(const CsrMatrix& A, int64_t r0, int64_t r1, int64_t p, int64_t parts) {
  if (p >= parts) return r1;
  const int64_t target = A.row_ptr[r0] + (A.row_ptr[r1] - A.row_ptr[r0]) * p / parts;
  return std::lower_bound(A.row_ptr.begin() + r0, A.row_ptr.begin() + r1 + 1, target) - A.row_ptr.begin();
}

// Rows [r0, r1) of C: each row one gather over its non-zeros in column order, the loop over
// the D columns vectorised. Four non-zeros a pass load and store C's row once for four
// multiply-adds (1.35-1.9x over one a pass on Cora and R-MAT), added one after the other as
// a pass per non-zero adds them, so the bits do not change. (Holding the row's sums in
// registers over column blocks measured slower: each block walks the indices again.)
void rows_one_thread(const CsrMatrix& A, const float* B, float* C, int64_t D, int64_t r0, int64_t r1,
                     bool accumulate) {
  const int64_t* __restrict row_ptr = A.row_ptr.data();
  const int32_t* __restrict col = A.col.data();
  const float* __restrict val = A.val.data();
  auto row_of_b = [&](int64_t k) { return B + static_cast<int64_t>(col[k]) * D; };  // (D)
  for (int64_t r = r0; r < r1; ++r) {
    float* __restrict c = C + r * D;  // (D)
    if (!accumulate) std::fill(c, c + D, 0.0f);
    int64_t k = row_ptr[r];
    for (; k + 4 <= row_ptr[r + 1]; k += 4) {
      const float v0 = val[k], v1 = val[k + 1], v2 = val[k + 2], v3 = val[k + 3];
      const float* __restrict b0 = row_of_b(k);
      const float* __restrict b1 = row_of_b(k + 1);
      const float* __restrict b2 = row_of_b(k + 2);
      const float* __restrict b3 = row_of_b(k + 3);
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) c[d] = (((c[d] + v0 * b0[d]) + v1 * b1[d]) + v2 * b2[d]) + v3 * b3[d];
    }
    for (; k < row_ptr[r + 1]; ++k) {
      const float v = val[k];
      const float* __restrict b = row_of_b(k);
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) c[d] += v * b[d];
    }
  }
}
}  // namespace

std::vector<int64_t> rows_balanced_by_nnz(const CsrMatrix& A, int parts) {
  std::vector<int64_t> bounds(static_cast<size_t>(parts) + 1);
  for (int p = 0; p <= parts; ++p) bounds[static_cast<size_t>(p)] = part_begin(A, 0, A.rows, p, parts);
  return bounds;
}

void spmm_rows(const CsrMatrix& A, const float* B, float* C, int64_t D, int64_t r0, int64_t r1, bool accumulate) {
  if (r0 >= r1) return;
  const int threads = (A.row_ptr[r1] - A.row_ptr[r0]) * D >= kSpmmParallelMin ? omp_get_max_threads() : 1;
  if (threads == 1) return rows_one_thread(A, B, C, D, r0, r1, accumulate);
  // Each thread finds its own rows (two binary searches): nothing allocated per call.
#pragma omp parallel num_threads(threads)
  {
    const int64_t part = omp_get_thread_num(), parts = omp_get_num_threads();
    rows_one_thread(A, B, C, D, part_begin(A, r0, r1, part, parts), part_begin(A, r0, r1, part + 1, parts), accumulate);
  }
}

void spmm(const CsrMatrix& A, const float* B, float* C, int64_t D, bool accumulate) {
  spmm_rows(A, B, C, D, 0, A.rows, accumulate);
}

}  // namespace loom::kernels
