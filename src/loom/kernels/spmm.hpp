// SpMM: C = A B with A sparse (CSR) and B dense, the aggregation step of a graph
// convolution. Rows of C are split over threads by non-zeros, not by count (power-law
// graphs put most edges on a few rows), each thread finding its own rows, so nothing is
// allocated per call; each row is one thread's gather over its non-zeros in column order,
// four at a time, with the inner loop over the D columns vectorised. So C is bit-identical
// for any thread count. The backward of C = A B is dB = Aᵀ dC: spmm of the transpose
// (sparse.hpp's csr_transpose, built once per graph).
#pragma once

#include <cstdint>
#include <vector>

#include "loom/kernels/sparse.hpp"

namespace loom::kernels {

// C (A.rows, D) = A (A.rows, A.cols) @ B (A.cols, D); overwrites C, or adds to it when accumulate.
void spmm(const CsrMatrix& A, const float* B, float* C, int64_t D, bool accumulate = false);
// Rows [r0, r1) of C = A B alone, the threads splitting them by non-zeros as spmm() splits all
// rows (a blocked aggregation's range at a time); the bits of each row are spmm()'s.
void spmm_rows(const CsrMatrix& A, const float* B, float* C, int64_t D, int64_t r0, int64_t r1,
               bool accumulate = false);
// The first row of each of `parts` ranges holding about nnz / parts non-zeros each
// ((parts + 1) boundaries, the last A.rows).
std::vector<int64_t> rows_balanced_by_nnz(const CsrMatrix& A, int parts);

}  // namespace loom::kernels
