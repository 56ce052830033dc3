// Causal attention, Loom's kernel (strided batched GEMMs over (B, NH), causal row blocks)
// next to a plain reference from the same run: explicit per-head copies of Q, K, V, the
// full T x T softmax(Q K^T) V with std::exp, copies back. Both report the same nominal
// GFLOP/s (the full, non-causal FLOP count), so the rate ratio is the speedup.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "loom/kernels/attention.hpp"
#include "loom/kernels/matmul.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/kernels/threads.hpp"

namespace {

using namespace loom::kernels;

struct Shape {
  int64_t B, T, C, NH;
};
constexpr Shape kMini{8, 256, 384, 6};
constexpr Shape kSmall{4, 1024, 768, 12};

std::vector<float> filled(int64_t n, float scale) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>((i * 7919) % 2001 - 1000) / 1000.0f;
  return v;
}

// Full, non-causal FLOPs of the GEMMs: 2 products forward, 4 backward, 2 B NH T^2 HS each.
double gemm_flops(const Shape& s, int products) {
  return 2.0 * products * s.B * s.C * static_cast<double>(s.T) * s.T;
}

// What a straightforward implementation does, one head at a time.
struct Plain {
  Shape s;
  int64_t HS;
  std::vector<float> q, k, v, o, dq, dk, dv, dO, dP;  // (T, HS) or (T, T) per head

  explicit Plain(const Shape& shape)
      : s(shape), HS(shape.C / shape.NH), q(s.T * HS), k(s.T * HS), v(s.T * HS), o(s.T * HS), dq(s.T * HS),
        dk(s.T * HS), dv(s.T * HS), dO(s.T * HS), dP(s.T * s.T) {}

  void gather(const float* src, int64_t stride, int64_t b, int64_t off, std::vector<float>& dst) const {
    for (int64_t t = 0; t < s.T; ++t) std::copy_n(src + (b * s.T + t) * stride + off, HS, dst.data() + t * HS);
  }
  void scatter(const std::vector<float>& src, float* dst, int64_t stride, int64_t b, int64_t off) const {
    for (int64_t t = 0; t < s.T; ++t) std::copy_n(src.data() + t * HS, HS, dst + (b * s.T + t) * stride + off);
  }

  // Copies head h of sequence b out of qkv (B, T, 3C) into q, k, v (T, HS): the copies a
  // plain implementation makes.
  void gather_qkv(const float* qkv, int64_t b, int64_t h) {
    gather(qkv, 3 * s.C, b, h * HS, q);
    gather(qkv, 3 * s.C, b, s.C + h * HS, k);
    gather(qkv, 3 * s.C, b, 2 * s.C + h * HS, v);
  }

  void forward(float* out, float* att, const float* qkv) {
    const int64_t T = s.T, C = s.C;
    const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t h = 0; h < s.NH; ++h) {
        gather_qkv(qkv, b, h);
        float* P = att + (b * s.NH + h) * T * T;  // (T, T)
        matmul(q.data(), Trans::N, k.data(), Trans::T, P, T, T, HS);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < T; ++i) {
          float* row = P + i * T;
          float mx = -INFINITY;
          for (int64_t j = 0; j < T; ++j) {
            row[j] = j <= i ? row[j] * scale : -INFINITY;
            mx = std::max(mx, row[j]);
          }
          float sum = 0.0f;
          for (int64_t j = 0; j < T; ++j) sum += row[j] = std::exp(row[j] - mx);
          for (int64_t j = 0; j < T; ++j) row[j] /= sum;
        }
        matmul(P, Trans::N, v.data(), Trans::N, o.data(), T, HS, T);
        scatter(o, out, C, b, h * HS);
      }
  }

  void backward(float* dqkv, const float* dout, const float* qkv, const float* att) {
    const int64_t T = s.T, C = s.C;
    const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t h = 0; h < s.NH; ++h) {
        gather_qkv(qkv, b, h);
        gather(dout, C, b, h * HS, dO);
        const float* P = att + (b * s.NH + h) * T * T;  // (T, T)
        matmul(P, Trans::T, dO.data(), Trans::N, dv.data(), T, HS, T);
        matmul(dO.data(), Trans::N, v.data(), Trans::T, dP.data(), T, T, HS);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < T; ++i) {
          float dot = 0.0f;
          for (int64_t j = 0; j < T; ++j) dot += P[i * T + j] * dP[i * T + j];
          for (int64_t j = 0; j < T; ++j) dP[i * T + j] = P[i * T + j] * (dP[i * T + j] - dot) * scale;
        }
        matmul(dP.data(), Trans::N, k.data(), Trans::N, dq.data(), T, HS, T);
        matmul(dP.data(), Trans::T, q.data(), Trans::N, dk.data(), T, HS, T);
        scatter(dq, dqkv, 3 * C, b, h * HS);
        scatter(dk, dqkv, 3 * C, b, C + h * HS);
        scatter(dv, dqkv, 3 * C, b, 2 * C + h * HS);
      }
  }
};

struct Buffers {
  std::vector<float> qkv, out, att, datt, dout, dqkv;
  explicit Buffers(const Shape& s)
      : qkv(filled(s.B * s.T * 3 * s.C, 2.0f)), out(s.B * s.T * s.C), att(s.B * s.NH * s.T * s.T),
        datt(s.B * s.NH * s.T * s.T), dout(filled(s.B * s.T * s.C, 1.0f)), dqkv(s.B * s.T * 3 * s.C) {}
};

void report(benchmark::State& state, double flops) {
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  set_num_threads(1);
}

void BM_AttentionForward(benchmark::State& state, Shape s, bool plain) {
  set_num_threads(static_cast<int>(state.range(0)));
  Buffers buf(s);
  Plain ref(s);
  for (auto _ : state) {
    if (plain)
      ref.forward(buf.out.data(), buf.att.data(), buf.qkv.data());
    else
      attention_forward(buf.out.data(), buf.att.data(), buf.qkv.data(), s.B, s.T, s.C, s.NH);
    benchmark::DoNotOptimize(buf.out.data());
  }
  report(state, gemm_flops(s, 2));
}

void BM_AttentionBackward(benchmark::State& state, Shape s, bool plain) {
  set_num_threads(static_cast<int>(state.range(0)));
  Buffers buf(s);
  Plain ref(s);
  attention_forward(buf.out.data(), buf.att.data(), buf.qkv.data(), s.B, s.T, s.C, s.NH);
  for (auto _ : state) {
    if (plain)
      ref.backward(buf.dqkv.data(), buf.dout.data(), buf.qkv.data(), buf.att.data());
    else
      attention_backward(buf.dqkv.data(), buf.datt.data(), buf.dout.data(), buf.qkv.data(), buf.att.data(),
                         s.B, s.T, s.C, s.NH);
    benchmark::DoNotOptimize(buf.dqkv.data());
  }
  report(state, gemm_flops(s, 4));
}

// Mixed precision's training path: q, k, v in the bf16 copy the layer keeps, no probabilities
// kept (backward recomputes them from the rows' log-sum-exp that forward keeps), bf16 products. Next to the fp32 rows above: the ratio is
// what bf16 buys the attention core.
void BM_AttentionBf16(benchmark::State& state, Shape s, bool backward) {
  set_num_threads(static_cast<int>(state.range(0)));
  PrecisionScope bf16(Precision::BF16);
  Buffers buf(s);
  std::vector<loom::bfloat16> qkv(buf.qkv.size());
  convert_to_bf16(buf.qkv.data(), qkv.data(), static_cast<int64_t>(qkv.size()));
  std::vector<float> lse(s.B * s.NH * s.T);  // the rows' log-sum-exp, kept by forward for backward
  attention_forward(buf.out.data(), nullptr, qkv.data(), s.B, s.T, s.C, s.NH, lse.data());
  for (auto _ : state) {
    if (backward)
      attention_backward(buf.dqkv.data(), nullptr, buf.dout.data(), qkv.data(), nullptr, s.B, s.T, s.C, s.NH,
                         lse.data());
    else
      attention_forward(buf.out.data(), nullptr, qkv.data(), s.B, s.T, s.C, s.NH, lse.data());
    benchmark::DoNotOptimize(buf.dqkv.data());
    benchmark::DoNotOptimize(buf.out.data());
  }
  report(state, gemm_flops(s, backward ? 4 : 2));
}

// A training step's attention (forward, then backward) with attention dropout p against the
// same without (p = 0), fp32 (probabilities kept) or bf16 (the log-sum-exp kept): what hashing
// a mask for every visible probability, three times a step, costs next to the products.
void BM_AttentionDropoutStep(benchmark::State& state, Shape s, bool bf16, float p) {
  set_num_threads(static_cast<int>(state.range(0)));
  PrecisionScope precision(bf16 ? Precision::BF16 : Precision::F32);
  Buffers buf(s);
  std::vector<loom::bfloat16> qkv16(buf.qkv.size());
  convert_to_bf16(buf.qkv.data(), qkv16.data(), static_cast<int64_t>(qkv16.size()));
  const Operand qkv = bf16 ? Operand(qkv16.data()) : Operand(buf.qkv.data());
  std::vector<float> lse(s.B * s.NH * s.T);
  const AttentionDropout drop{.p = p, .key = 1, .heads = s.NH, .positions = s.T};
  float* att = bf16 ? nullptr : buf.att.data();
  for (auto _ : state) {
    attention_forward(buf.out.data(), att, qkv, s.B, s.T, s.C, s.NH, lse.data(), drop);
    attention_backward(buf.dqkv.data(), bf16 ? nullptr : buf.datt.data(), buf.dout.data(), qkv, att, s.B, s.T, s.C,
                       s.NH, bf16 ? lse.data() : nullptr, drop);
    benchmark::DoNotOptimize(buf.dqkv.data());
  }
  report(state, gemm_flops(s, 6));
}

// Argument: thread count.
#define LOOM_ATTENTION_BENCH(fn, name, shape, plain) \
  BENCHMARK_CAPTURE(fn, name, shape, plain)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()

LOOM_ATTENTION_BENCH(BM_AttentionForward, gpt_mini_loom, kMini, false);
LOOM_ATTENTION_BENCH(BM_AttentionForward, gpt_mini_plain, kMini, true);
LOOM_ATTENTION_BENCH(BM_AttentionBackward, gpt_mini_loom, kMini, false);
LOOM_ATTENTION_BENCH(BM_AttentionBackward, gpt_mini_plain, kMini, true);
LOOM_ATTENTION_BENCH(BM_AttentionForward, gpt2_small_loom, kSmall, false);
LOOM_ATTENTION_BENCH(BM_AttentionForward, gpt2_small_plain, kSmall, true);
LOOM_ATTENTION_BENCH(BM_AttentionBackward, gpt2_small_loom, kSmall, false);
LOOM_ATTENTION_BENCH(BM_AttentionBackward, gpt2_small_plain, kSmall, true);
LOOM_ATTENTION_BENCH(BM_AttentionBf16, gpt_mini_forward, kMini, false);
LOOM_ATTENTION_BENCH(BM_AttentionBf16, gpt_mini_backward, kMini, true);
LOOM_ATTENTION_BENCH(BM_AttentionBf16, gpt2_small_forward, kSmall, false);
LOOM_ATTENTION_BENCH(BM_AttentionBf16, gpt2_small_backward, kSmall, true);

#define LOOM_DROPOUT_BENCH(name, shape, bf16, p) \
  BENCHMARK_CAPTURE(BM_AttentionDropoutStep, name, shape, bf16, p)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()
LOOM_DROPOUT_BENCH(gpt_mini_fp32_p0, kMini, false, 0.0f);
LOOM_DROPOUT_BENCH(gpt_mini_fp32_p0.1, kMini, false, 0.1f);
LOOM_DROPOUT_BENCH(gpt_mini_bf16_p0, kMini, true, 0.0f);
LOOM_DROPOUT_BENCH(gpt_mini_bf16_p0.1, kMini, true, 0.1f);
LOOM_DROPOUT_BENCH(gpt2_small_fp32_p0, kSmall, false, 0.0f);
LOOM_DROPOUT_BENCH(gpt2_small_fp32_p0.1, kSmall, false, 0.1f);
LOOM_DROPOUT_BENCH(gpt2_small_bf16_p0, kSmall, true, 0.0f);
LOOM_DROPOUT_BENCH(gpt2_small_bf16_p0.1, kSmall, true, 0.1f);

}  // namespace
