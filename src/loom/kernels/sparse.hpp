// Sparse matrices for graph networks: CSR storage, its transpose, and the GCN's normalised
// adjacency Â = D^-1/2 (A + I) D^-1/2 (Kipf & Welling 2017), where A is the graph made
// undirected without duplicate edges or self-loops and D the degrees of A + I.
#pragma once

#include <cstdint>
#include <vector>

namespace loom::kernels {

struct CsrMatrix {
  int64_t rows = 0, cols = 0;
  std::vector<int64_t> row_ptr;  // (rows + 1)
  std::vector<int32_t> col;      // (nnz), increasing within a row
  std::vector<float> val;        // (nnz)
  int64_t nnz() const { return static_cast<int64_t>(col.size()); }
};

// Â for N nodes and the directed edges src[e] -> dst[e] (both directions are used).
CsrMatrix gcn_normalized_adjacency(int64_t N, const std::vector<int64_t>& src, const std::vector<int64_t>& dst);
// Aᵀ in CSR (columns become rows), so the backward SpMM is a gather too: deterministic, no atomics.
CsrMatrix csr_transpose(const CsrMatrix& a);
// The non-zeros of a dense (rows, cols) matrix (bag-of-words features are mostly zeros).
CsrMatrix dense_to_csr(const float* x, int64_t rows, int64_t cols);
// A dense (rows, cols) copy, for tests and references.
std::vector<float> csr_to_dense(const CsrMatrix& a);

}  // namespace loom::kernels
