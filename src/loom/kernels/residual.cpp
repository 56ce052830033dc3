// Residual add and the element-wise helpers around it. All are parallel over contiguous
// static chunks once the work covers the fork cost. Reductions (sum_squares, bias_backward)
// never use OpenMP `reduction` on floats, whose combining order is unspecified: sum_squares
// adds per-thread partials in thread order, bias_backward splits the reduced-into columns.
#include "loom/kernels/residual.hpp"

#include "loom/kernels/precision.hpp"

#include <omp.h>

#include <algorithm>
#include <vector>

namespace loom::kernels {

namespace {
constexpr int64_t kResidualParallelMin = 1 << 15;
}  // namespace

// Element-wise with aliasing allowed, hence no __restrict.
void residual_forward(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kResidualParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void add_inplace(float* dst, const float* src, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kResidualParallelMin)
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

void scale_inplace(float* dst, float s, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kResidualParallelMin)
  for (int64_t i = 0; i < n; ++i) dst[i] *= s;
}

double sum_squares(const float* x, int64_t n) {
  const int nt = n >= kResidualParallelMin ? omp_get_max_threads() : 1;
  std::vector<double> partial(static_cast<size_t>(nt), 0.0);  // (nt)
#pragma omp parallel num_threads(nt)
  {
    const int tid = omp_get_thread_num(), nth = omp_get_num_threads();
    const int64_t i0 = n * tid / nth, i1 = n * (tid + 1) / nth;
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = i0; i < i1; ++i) s += static_cast<double>(x[i]) * x[i];
    partial[tid] = s;
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

void bias_backward(float* dbias, const float* dout, int64_t N, int64_t OC, bfloat16* dout_bf16) {
#pragma omp parallel if (N * OC >= kResidualParallelMin)
  {
    // Each thread owns a column slice (whole cache lines, of the bf16 copy's too) and sums its
    // rows in order into a local accumulator, so every dbias element has one fixed summation order.
    const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
    const int64_t slice = ((OC + nt - 1) / nt + 31) & ~int64_t{31};
    const int64_t c0 = std::min(OC, tid * slice), c1 = std::min(OC, c0 + slice);
    std::vector<float> acc(static_cast<size_t>(c1 - c0), 0.0f);  // (c1 - c0)
    float* __restrict a = acc.data();
    for (int64_t r = 0; r < N; ++r) {
      const float* __restrict d = dout + r * OC + c0;
#pragma omp simd
      for (int64_t c = 0; c < c1 - c0; ++c) a[c] += d[c];
      if (dout_bf16 != nullptr) convert_run_to_bf16(d, dout_bf16 + r * OC + c0, c1 - c0);
    }
    for (int64_t c = c0; c < c1; ++c) dbias[c] += a[c - c0];
  }
}

}  // namespace loom::kernels
