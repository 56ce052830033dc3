// The grouped expert GEMM of a mixture of experts (nn/experts.cpp: one oneDNN GEMM per expert
// on its block of rows) against one dense GEMM of all the rows: gpt-mini's first MLP
// projection (C 384 -> 1536) over B*T = 2048 tokens routed top-2 to 8 experts, 4096 rows in
// all, split evenly (512 each) or skewed (one expert 4x the others' share). The dense
// counterpart is BM_Linear/gpt_mini_fc_fwd at 4096 rows (bench_matmul.cpp runs it at 2048).
// Training's counts change every step: BM_GroupedExperts_changing draws new ones (each expert
// 256-767 rows) every iteration and multiplies them as fixed shapes (/0: a primitive created
// per new count, as every expert product was before kernels::Varying) or with the row count
// given at run time (/1: one primitive shared, as the experts run now).
// Argument: thread count (for _changing: the path, then the thread count).
#include <benchmark/benchmark.h>

#include <vector>

#include "loom/kernels/matmul.hpp"
#include "loom/kernels/threads.hpp"

namespace {

using namespace loom::kernels;

constexpr int64_t kRows = 4096, kIn = 384, kOut = 1536, kExperts = 8;

void run_grouped(benchmark::State& state, const std::vector<int64_t>& counts) {
  set_num_threads(static_cast<int>(state.range(0)));
  std::vector<float> x(kRows * kIn, 0.01f), w(kExperts * kOut * kIn, 0.02f), b(kExperts * kOut, 0.1f), y(kRows * kOut);
  for (auto _ : state) {
    int64_t r0 = 0;
    for (int64_t e = 0; e < kExperts; ++e) {
      const int64_t n = counts[static_cast<size_t>(e)];
      matmul(x.data() + r0 * kIn, Trans::N, w.data() + e * kOut * kIn, Trans::T, y.data() + r0 * kOut, n, kOut, kIn,
             b.data() + e * kOut);
      r0 += n;
    }
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * kRows * kIn * kOut * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  set_num_threads(1);
}

void BM_GroupedExperts_changing(benchmark::State& state) {
  const Varying varying = state.range(0) == 1 ? Varying::Rows : Varying::None;
  set_num_threads(static_cast<int>(state.range(1)));
  constexpr int64_t kMostRows = kExperts * 768;
  std::vector<float> x(kMostRows * kIn, 0.01f), w(kExperts * kOut * kIn, 0.02f), b(kExperts * kOut, 0.1f),
      y(kMostRows * kOut);
  // One sequence for every run of the benchmark (Google Benchmark calls it more than once).
  static uint64_t draw = 0x9e3779b97f4a7c15ULL;
  int64_t rows = 0;
  for (auto _ : state) {
    int64_t r0 = 0;
    for (int64_t e = 0; e < kExperts; ++e) {
      draw = draw * 6364136223846793005ULL + 1442695040888963407ULL;  // a 64-bit LCG: counts rarely repeat
      const int64_t n = 256 + static_cast<int64_t>((draw >> 33) % 512);
      matmul(x.data() + r0 * kIn, Trans::N, w.data() + e * kOut * kIn, Trans::T, y.data() + r0 * kOut, n, kOut, kIn,
             b.data() + e * kOut, false, varying);
      r0 += n;
    }
    rows += r0;
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * static_cast<double>(rows) * kIn * kOut * 1e-9, benchmark::Counter::kIsRate);
  set_num_threads(1);
}

void BM_GroupedExperts_even(benchmark::State& state) { run_grouped(state, std::vector<int64_t>(kExperts, kRows / kExperts)); }

void BM_GroupedExperts_skewed(benchmark::State& state) {
  std::vector<int64_t> counts(kExperts, 372);  // 7 x 372 + 1492 = 4096
  counts[0] = kRows - 7 * 372;
  run_grouped(state, counts);
}

void BM_DenseSameRows(benchmark::State& state) {
  set_num_threads(static_cast<int>(state.range(0)));
  std::vector<float> x(kRows * kIn, 0.01f), w(kOut * kIn, 0.02f), b(kOut, 0.1f), y(kRows * kOut);
  for (auto _ : state) {
    matmul(x.data(), Trans::N, w.data(), Trans::T, y.data(), kRows, kOut, kIn, b.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * kRows * kIn * kOut * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  set_num_threads(1);
}

BENCHMARK(BM_GroupedExperts_changing)->ArgsProduct({{0, 1}, {1, 2}})->UseRealTime();
BENCHMARK(BM_GroupedExperts_even)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_GroupedExperts_skewed)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_DenseSameRows)->Arg(1)->Arg(2)->UseRealTime();

}  // namespace
