// Token + position embedding, fused (GPT-2's wte[inp] + wpe[t]).
// Ids are validated before any parallel region, since an exception must not escape an
// OpenMP region. The backward is parallel over channel slices: each dwte/dwpe element is
// summed by one thread in (b, t) order, so the result does not depend on the thread count.
#include "loom/kernels/embedding.hpp"

#include <omp.h>

#include <algorithm>

#include "loom/error.hpp"

namespace loom::kernels {

void embedding_forward(float* out, const int32_t* inp, const float* wte, const float* wpe,
                       int64_t B, int64_t T, int64_t C, int64_t V) {
  const int64_t N = B * T;
  for (int64_t n = 0; n < N; ++n) {
    check(inp[n] >= 0 && inp[n] < V, "embedding: token id ", inp[n], " at position ", n,
          " is out of range [0, ", V, ")");
  }
#pragma omp parallel for schedule(static) if (N * C >= (1 << 15))
  for (int64_t n = 0; n < N; ++n) {
    float* __restrict o = out + n * C;                 // (C)
    const float* __restrict te = wte + inp[n] * C;     // (C)
    const float* __restrict pe = wpe + (n % T) * C;    // (C)
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] = te[c] + pe[c];
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp,
                        int64_t B, int64_t T, int64_t C) {
  const int64_t N = B * T;
#pragma omp parallel if (N * C >= (1 << 15))
  {
    // Slices are whole 64-byte lines so two threads never write the same cache line.
    const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
    const int64_t slice = ((C + nt - 1) / nt + 15) & ~int64_t{15};
    const int64_t c0 = std::min(C, tid * slice), c1 = std::min(C, c0 + slice);
    for (int64_t n = 0; n < N; ++n) {
      const float* __restrict d = dout + n * C;        // (C)
      float* __restrict te = dwte + inp[n] * C;        // (C)
      float* __restrict pe = dwpe + (n % T) * C;       // (C)
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) {
        te[c] += d[c];
        pe[c] += d[c];
      }
    }
  }
}

}  // namespace loom::kernels
