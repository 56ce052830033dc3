// The grouped expert GEMM of a mixture of experts (nn/experts.cpp: one oneDNN GEMM per expert
// on its block of rows) against one dense GEMM of all the rows: gpt-mini's first MLP
// projection (C 384 -> 1536) over B*T = 2048 tokens routed top-2 to 8 experts, 4096 rows in
// all, split evenly (512 each) or skewed (one expert 4x the others' share). The dense
// counterpart is BM_Linear/gpt_mini_fc_fwd at 4096 rows (bench_matmul.cpp runs it at 2048).
// Argument: thread count.
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

BENCHMARK(BM_GroupedExperts_even)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_GroupedExperts_skewed)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_DenseSameRows)->Arg(1)->Arg(2)->UseRealTime();

}  // namespace
