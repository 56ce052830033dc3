// GEMM throughput of the Linear layers of gpt-mini and gpt2-small through matmul.hpp, in the
// three forms training uses: forward out = x W^T + b, dinp = dout W, dW += dout^T x.
// Argument: thread count.
#include <benchmark/benchmark.h>

#include <vector>

#include "loom/kernels/matmul.hpp"
#include "loom/kernels/threads.hpp"

namespace {

using namespace loom::kernels;

enum class Pass { Forward, BackwardInput, BackwardWeight };

// rows = B * T; in_features -> out_features.
void BM_Linear(benchmark::State& state, int64_t rows, int64_t in, int64_t out, Pass pass) {
  set_num_threads(static_cast<int>(state.range(0)));
  std::vector<float> x(rows * in, 0.01f), w(out * in, 0.02f), b(out, 0.1f), y(rows * out, 0.03f);
  std::vector<float> dx(rows * in), dw(out * in, 0.0f);
  for (auto _ : state) {
    switch (pass) {
      case Pass::Forward:  // y (rows, out) = x (rows, in) @ w^T, w stored (out, in)
        matmul(x.data(), Trans::N, w.data(), Trans::T, y.data(), rows, out, in, b.data());
        break;
      case Pass::BackwardInput:  // dx (rows, in) = dy (rows, out) @ w
        matmul(y.data(), Trans::N, w.data(), Trans::N, dx.data(), rows, in, out);
        break;
      case Pass::BackwardWeight:  // dw (out, in) += dy^T @ x
        matmul(y.data(), Trans::T, x.data(), Trans::N, dw.data(), out, in, rows, nullptr, true);
        break;
    }
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * rows * in * out * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  set_num_threads(1);
}

#define LOOM_LINEAR(name, rows, in, out)                                                              \
  BENCHMARK_CAPTURE(BM_Linear, name##_fwd, rows, in, out, Pass::Forward)->Arg(1)->Arg(2)->UseRealTime();      \
  BENCHMARK_CAPTURE(BM_Linear, name##_dinp, rows, in, out, Pass::BackwardInput)->Arg(1)->Arg(2)->UseRealTime(); \
  BENCHMARK_CAPTURE(BM_Linear, name##_dw, rows, in, out, Pass::BackwardWeight)->Arg(1)->Arg(2)->UseRealTime()

// gpt-mini: B*T = 2048, C = 384, padded vocabulary 128.
LOOM_LINEAR(gpt_mini_qkv, 2048, 384, 1152);
LOOM_LINEAR(gpt_mini_attn_proj, 2048, 384, 384);
LOOM_LINEAR(gpt_mini_fc, 2048, 384, 1536);
LOOM_LINEAR(gpt_mini_fc_proj, 2048, 1536, 384);
LOOM_LINEAR(gpt_mini_lm_head, 2048, 384, 128);
// gpt2-small: B*T = 4096, C = 768, padded vocabulary 50304.
LOOM_LINEAR(gpt2_small_qkv, 4096, 768, 2304);
LOOM_LINEAR(gpt2_small_attn_proj, 4096, 768, 768);
LOOM_LINEAR(gpt2_small_fc, 4096, 768, 3072);
LOOM_LINEAR(gpt2_small_fc_proj, 4096, 3072, 768);
LOOM_LINEAR(gpt2_small_lm_head, 4096, 768, 50304);

}  // namespace
