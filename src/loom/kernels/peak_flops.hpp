// Measures this machine's fp32 GEMM throughput with oneDNN, the denominator of MFU
// ("what fraction of the matmul peak did training reach").
#pragma once

namespace loom::kernels {

// GFLOP/s of a square-ish transformer-shaped GEMM at the current thread count, the best of
// a few repetitions over about `seconds`.
double measure_matmul_gflops(double seconds = 0.3, int size = 1024);

}  // namespace loom::kernels
