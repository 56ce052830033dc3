// Measures this machine's GEMM throughput with oneDNN in a precision, the denominator of MFU
// ("what fraction of the matmul peak did training reach").
#pragma once

#include "loom/kernels/precision.hpp"

namespace loom::kernels {

// GFLOP/s of a square-ish transformer-shaped GEMM at the current thread count, the best of
// a few repetitions over about `seconds`; bf16 operands (converted before timing) for BF16.
// Each repetition is timed by the CPU time its threads got (capped by its wall time), so a
// loaded machine measures the peak of the cores, not of the share this probe got.
double measure_matmul_gflops(double seconds = 0.3, int size = 1024, Precision precision = Precision::F32);

}  // namespace loom::kernels
