#include "loom/kernels/spmm.hpp"

#include <omp.h>

#include <algorithm>

namespace loom::kernels {

namespace {
// Below this many multiply-adds a parallel region costs more than it saves.
constexpr int64_t kSpmmParallelMin = 1 << 15;
}  // namespace

std::vector<int64_t> rows_balanced_by_nnz(const CsrMatrix& A, int parts) {
  std::vector<int64_t> bounds(static_cast<size_t>(parts) + 1, A.rows);
  bounds[0] = 0;
  const int64_t nnz = A.nnz();
  for (int p = 1; p < parts; ++p) {
    // The first row whose non-zeros start at or after p / parts of them.
    const int64_t target = nnz * p / parts;
    bounds[static_cast<size_t>(p)] =
        std::lower_bound(A.row_ptr.begin(), A.row_ptr.end(), target) - A.row_ptr.begin();
    bounds[static_cast<size_t>(p)] = std::clamp(bounds[static_cast<size_t>(p)], bounds[static_cast<size_t>(p - 1)], A.rows);
  }
  return bounds;
}

void spmm(const CsrMatrix& A, const float* B, float* C, int64_t D, bool accumulate) {
  const int threads = A.nnz() * D >= kSpmmParallelMin ? omp_get_max_threads() : 1;
  const std::vector<int64_t> bounds = rows_balanced_by_nnz(A, threads);
  const int64_t* __restrict row_ptr = A.row_ptr.data();
  const int32_t* __restrict col = A.col.data();
  const float* __restrict val = A.val.data();
#pragma omp parallel for schedule(static, 1) num_threads(threads) if (threads > 1)
  for (int part = 0; part < threads; ++part) {
    for (int64_t r = bounds[static_cast<size_t>(part)]; r < bounds[static_cast<size_t>(part) + 1]; ++r) {
      float* __restrict c = C + r * D;  // (D)
      if (!accumulate) std::fill(c, c + D, 0.0f);
      for (int64_t k = row_ptr[r]; k < row_ptr[r + 1]; ++k) {
        const float v = val[k];
        const float* __restrict b = B + static_cast<int64_t>(col[k]) * D;  // (D)
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) c[d] += v * b[d];
      }
    }
  }
}

}  // namespace loom::kernels
