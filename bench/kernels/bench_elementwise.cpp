// Memory-bound kernels (embedding, LayerNorm, GELU, residual, bias gradient, cross-entropy,
// AdamW) at gpt-mini and gpt2-small activation sizes. Each reports GB/s over the bytes it
// must move at least once (reads + writes), to compare with the machine's stream bandwidth.
#include <benchmark/benchmark.h>

#include <vector>

#include "loom/kernels/adamw.hpp"
#include "loom/kernels/cross_entropy.hpp"
#include "loom/kernels/embedding.hpp"
#include "loom/kernels/gelu.hpp"
#include "loom/kernels/layernorm.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/kernels/residual.hpp"
#include "loom/kernels/threads.hpp"

namespace {

using namespace loom::kernels;

struct Model {
  int64_t B, T, C, V, Vp, params;
};
constexpr Model kMini{8, 256, 384, 65, 128, 10'800'000};
constexpr Model kSmall{4, 1024, 768, 50257, 50304, 124'000'000};

std::vector<float> filled(int64_t n, float scale) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>((i * 7919) % 2001 - 1000) / 1000.0f;
  return v;
}

// floats moved per iteration -> GB/s; resets the thread count for the next benchmark.
void report(benchmark::State& state, double floats) {
  state.counters["GB/s"] = benchmark::Counter(floats * 4e-9, benchmark::Counter::kIsIterationInvariantRate);
  set_num_threads(1);
}

void threads(benchmark::State& state) { set_num_threads(static_cast<int>(state.range(0))); }

void BM_EmbeddingForward(benchmark::State& state, Model m) {
  threads(state);
  const int64_t N = m.B * m.T;
  std::vector<int32_t> ids(N);
  for (int64_t i = 0; i < N; ++i) ids[i] = static_cast<int32_t>((i * 31) % m.V);
  const auto wte = filled(m.Vp * m.C, 1.0f), wpe = filled(m.T * m.C, 1.0f);
  std::vector<float> out(N * m.C);
  for (auto _ : state) embedding_forward(out.data(), ids.data(), wte.data(), wpe.data(), m.B, m.T, m.C, m.V);
  report(state, 3.0 * N * m.C);
}

void BM_EmbeddingBackward(benchmark::State& state, Model m) {
  threads(state);
  const int64_t N = m.B * m.T;
  std::vector<int32_t> ids(N);
  for (int64_t i = 0; i < N; ++i) ids[i] = static_cast<int32_t>((i * 31) % m.V);
  const auto dout = filled(N * m.C, 1.0f);
  std::vector<float> dwte(m.Vp * m.C, 0.0f), dwpe(m.T * m.C, 0.0f);
  for (auto _ : state) embedding_backward(dwte.data(), dwpe.data(), dout.data(), ids.data(), m.B, m.T, m.C);
  report(state, 3.0 * N * m.C);
}

void BM_LayerNormForward(benchmark::State& state, Model m) {
  threads(state);
  const int64_t N = m.B * m.T;
  const auto x = filled(N * m.C, 1.0f), w = filled(m.C, 1.0f), b = filled(m.C, 0.1f);
  std::vector<float> out(N * m.C), mean(N), rstd(N);
  for (auto _ : state) layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, m.C);
  report(state, 2.0 * N * m.C);
}

void BM_LayerNormBackward(benchmark::State& state, Model m) {
  threads(state);
  const int64_t N = m.B * m.T;
  const auto x = filled(N * m.C, 1.0f), w = filled(m.C, 1.0f), b = filled(m.C, 0.1f);
  const auto dout = filled(N * m.C, 0.5f);
  std::vector<float> out(N * m.C), mean(N), rstd(N), dinp(N * m.C), dw(m.C, 0.0f), db(m.C, 0.0f);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, m.C);
  for (auto _ : state)
    layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                       rstd.data(), N, m.C);
  report(state, 3.0 * N * m.C);
}

// GELU runs on the MLP's hidden activations, (B*T, 4C).
void BM_GeluForward(benchmark::State& state, Model m) {
  threads(state);
  const int64_t n = m.B * m.T * 4 * m.C;
  const auto x = filled(n, 4.0f);
  std::vector<float> out(n);
  for (auto _ : state) gelu_forward(out.data(), x.data(), n);
  report(state, 2.0 * n);
}

void BM_GeluBackward(benchmark::State& state, Model m) {
  threads(state);
  const int64_t n = m.B * m.T * 4 * m.C;
  const auto x = filled(n, 4.0f), dout = filled(n, 1.0f);
  std::vector<float> dinp(n);
  for (auto _ : state) gelu_backward(dinp.data(), x.data(), dout.data(), n);
  report(state, 3.0 * n);
}

void BM_Residual(benchmark::State& state, Model m) {
  threads(state);
  const int64_t n = m.B * m.T * m.C;
  const auto a = filled(n, 1.0f), b = filled(n, 1.0f);
  std::vector<float> out(n);
  for (auto _ : state) residual_forward(out.data(), a.data(), b.data(), n);
  report(state, 3.0 * n);
}

// The fc layer's bias gradient, (B*T, 4C) summed over rows.
void BM_BiasBackward(benchmark::State& state, Model m) {
  threads(state);
  const int64_t N = m.B * m.T, OC = 4 * m.C;
  const auto dout = filled(N * OC, 1.0f);
  std::vector<float> dbias(OC, 0.0f);
  for (auto _ : state) bias_backward(dbias.data(), dout.data(), N, OC);
  report(state, 1.0 * N * OC);
}

void BM_CrossEntropyForward(benchmark::State& state, Model m) {
  threads(state);
  const int64_t N = m.B * m.T;
  const auto logits = filled(N * m.Vp, 5.0f);
  std::vector<int32_t> targets(N);
  for (int64_t i = 0; i < N; ++i) targets[i] = static_cast<int32_t>((i * 17) % m.V);
  std::vector<float> losses(N);
  for (auto _ : state) cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, m.V, m.Vp);
  report(state, 1.0 * N * m.V);
}

// In place, so later iterations run on gradients rather than logits: same work, finite values.
void BM_CrossEntropyBackward(benchmark::State& state, Model m) {
  threads(state);
  const int64_t N = m.B * m.T;
  auto logits = filled(N * m.Vp, 5.0f);
  std::vector<int32_t> targets(N);
  for (int64_t i = 0; i < N; ++i) targets[i] = static_cast<int32_t>((i * 17) % m.V);
  for (auto _ : state) cross_entropy_backward(logits.data(), targets.data(), 1.0f / N, N, m.V, m.Vp);
  report(state, 2.0 * N * m.Vp);
}

// One update over all parameters of the model as a single flat buffer.
void BM_AdamW(benchmark::State& state, Model m) {
  threads(state);
  const int64_t n = m.params;
  auto p = filled(n, 0.1f);
  const auto g = filled(n, 0.01f);
  std::vector<float> mom(n, 0.0f), var(n, 0.0f);
  AdamWParams a;
  a.weight_decay = 0.1f;
  for (auto _ : state) adamw_update(p.data(), g.data(), mom.data(), var.data(), n, a);
  report(state, 7.0 * n);
}

// Mixed precision's step: the update and the weights' bf16 copy, as two passes (the update,
// then the copy converted from the updated values) or as AdamW writing the copy in its pass.
void adamw_with_bf16_copy(benchmark::State& state, Model m, bool in_the_update) {
  threads(state);
  const int64_t n = m.params;
  auto p = filled(n, 0.1f);
  const auto g = filled(n, 0.01f);
  std::vector<float> mom(n, 0.0f), var(n, 0.0f);
  std::vector<loom::bfloat16> copy(n);
  AdamWParams a;
  a.weight_decay = 0.1f;
  for (auto _ : state) {
    adamw_update(p.data(), g.data(), mom.data(), var.data(), n, a, in_the_update ? copy.data() : nullptr);
    if (!in_the_update) convert_to_bf16(p.data(), copy.data(), n);
  }
  report(state, 7.5 * n);
}
void BM_AdamWThenBf16Copy(benchmark::State& state, Model m) { adamw_with_bf16_copy(state, m, false); }
void BM_AdamWWritingBf16Copy(benchmark::State& state, Model m) { adamw_with_bf16_copy(state, m, true); }

void BM_SumSquares(benchmark::State& state, Model m) {
  threads(state);
  const auto x = filled(m.params, 0.1f);
  for (auto _ : state) benchmark::DoNotOptimize(sum_squares(x.data(), m.params));
  report(state, 1.0 * m.params);
}

// Argument: thread count.
#define LOOM_BENCH(fn)                                                                            \
  BENCHMARK_CAPTURE(fn, gpt_mini, kMini)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond); \
  BENCHMARK_CAPTURE(fn, gpt2_small, kSmall)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond)

LOOM_BENCH(BM_EmbeddingForward);
LOOM_BENCH(BM_EmbeddingBackward);
LOOM_BENCH(BM_LayerNormForward);
LOOM_BENCH(BM_LayerNormBackward);
LOOM_BENCH(BM_GeluForward);
LOOM_BENCH(BM_GeluBackward);
LOOM_BENCH(BM_Residual);
LOOM_BENCH(BM_BiasBackward);
LOOM_BENCH(BM_CrossEntropyForward);
LOOM_BENCH(BM_CrossEntropyBackward);
LOOM_BENCH(BM_AdamW);
LOOM_BENCH(BM_AdamWThenBf16Copy);
LOOM_BENCH(BM_AdamWWritingBf16Copy);
LOOM_BENCH(BM_SumSquares);

}  // namespace
