#include "loom/kernels/peak_flops.hpp"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "loom/kernels/matmul.hpp"
#include "loom/kernels/threads.hpp"

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
  // A repetition's time is the lesser of its wall time and the CPU time per thread of the
  // OpenMP team that runs it (oneDNN's threads): the latter is what the cores spent on it
  // whatever else ran on them (other ranks waiting for this probe, another job, this
  // process's other threads), so a probe on a shared or oversubscribed machine still measures
  // a whole core's peak, and MFU (whose denominator already counts the cores a job gets)
  // cannot pass 100% because the probe ran slow. Wall time bounds it where CPU time
  // overcounts (threads spinning between repetitions).
  const int threads = std::max(1, num_threads());
  const auto team_cpu_seconds = [threads] {
    double total = 0.0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      timespec t{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
      total += static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
    }
    return total;
  };
  double best = 0.0;
  const auto start = std::chrono::steady_clock::now();
  do {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = team_cpu_seconds();
    run();
    const double cpu = (team_cpu_seconds() - c0) / threads;
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double dt = std::max(1e-9, std::min(wall, cpu));
    best = std::max(best, 2.0 * static_cast<double>(M * N * K) / dt / 1e9);
  } while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds);
  return best;
}

}  // namespace loom::kernels
