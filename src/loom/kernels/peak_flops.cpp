#include "loom/kernels/peak_flops.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

#include "loom/kernels/matmul.hpp"

namespace loom::kernels {

double measure_matmul_gflops(double seconds, int size, Precision precision) {
  const int64_t M = size, N = size, K = size;
  std::vector<float> A(static_cast<size_t>(M * K), 0.5f), B(static_cast<size_t>(K * N), 0.25f),
      C(static_cast<size_t>(M * N));  // (M, K) (K, N) (M, N)
  std::vector<bfloat16> Ab, Bb;
  if (precision == Precision::BF16) {
    Ab.assign(A.size(), to_bf16(0.5f));
    Bb.assign(B.size(), to_bf16(0.25f));
  }
  auto run = [&] {
    if (precision == Precision::BF16)
      matmul(Ab.data(), Trans::N, Bb.data(), Trans::T, C.data(), M, N, K);
    else
      matmul(A.data(), Trans::N, B.data(), Trans::T, C.data(), M, N, K);
  };
  run();  // warm-up, primitive creation
  double best = 0.0;
  const auto start = std::chrono::steady_clock::now();
  do {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * static_cast<double>(M * N * K) / dt / 1e9);
  } while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds);
  return best;
}

}  // namespace loom::kernels
