#include "local_cluster.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <functional>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "loom/kernels/attention.hpp"
#include "loom/kernels/gelu.hpp"
#include "loom/kernels/matmul.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/kernels/residual.hpp"
#include "loom/kernels/threads.hpp"

namespace loom::apps {

namespace {

using kernels::Trans;

double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Overwrites a buffer twice the core's own (level 2) cache: in a training step each kernel's
// operands were written by other kernels since it last ran, so they come from the shared
// last-level cache or memory, not warm from the previous run of the same kernel.
void evict_caches() {
  static std::vector<char> junk = [] {
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return std::vector<char>(static_cast<size_t>(2 * std::max(l2, 1L << 20)));
  }();
  std::memset(junk.data(), junk[0] + 1, junk.size());
}

// CPU seconds of `run` with cold caches, the fastest of 3-7 runs after a warm-up (which also
// creates the oneDNN primitive), or of fewer when one takes long: about 50 ms per shape. The
// fastest: a busy machine only ever slows a run down (shared caches, the hypervisor).
double fastest_seconds(const std::function<void()>& run) {
  run();
  std::vector<double> t;
  double spent = 0;
  while (t.empty() || (spent < 0.2 && (t.size() < 3 || (t.size() < 7 && spent < 0.05)))) {
    evict_caches();
    const double t0 = thread_seconds();
    run();
    t.push_back(thread_seconds() - t0);
    spent += t.back();
  }
  return std::max(*std::min_element(t.begin(), t.end()), 1e-9);
}

std::vector<float> buffer(int64_t n, float value) { return std::vector<float>(static_cast<size_t>(n), value); }

// Rows (tokens) beyond a few thousand only repeat the same kernel: a GEMM's rate and a
// pass's cost per value have long stopped changing, so larger shapes are timed on fewer rows:
// at most kMaxRows, and for wide matrices (an LM head over a large vocabulary) about
// kMaxFlops, at least kMinRows.
constexpr int64_t kMaxRows = 2048, kMinRows = 256;
constexpr double kMaxFlops = 1e9;

int64_t timed_rows(const plan::Gemm& g) {
  const auto by_flops = static_cast<int64_t>(kMaxFlops / (2.0 * static_cast<double>(g.n * g.k)));
  return std::min(g.m, std::clamp(by_flops, kMinRows, kMaxRows));
}

// A Linear's three products as nn::Linear runs them: y = x W^T + b; dx = dy W; dW += dy^T x
// and the bias gradient.
plan::MeasuredRate measure_linear(const plan::Gemm& g, bool bf16) {
  const int64_t M = timed_rows(g), N = g.n, K = g.k;
  std::vector<float> x = buffer(M * K, 0.5f), w = buffer(N * K, 0.25f), b = buffer(N, 0.1f), y = buffer(M * N, 0.f),
                     dw = buffer(N * K, 0.f), db = buffer(N, 0.f);  // x (M, K), W (N, K), y (M, N)
  // Mixed precision reads bf16 copies of the input, the weight and the output's gradient.
  std::vector<bfloat16> x16(bf16 ? x.size() : 0), w16(bf16 ? w.size() : 0), y16(bf16 ? y.size() : 0);
  kernels::convert_to_bf16(x.data(), x16.data(), static_cast<int64_t>(x16.size()));
  kernels::convert_to_bf16(w.data(), w16.data(), static_cast<int64_t>(w16.size()));
  kernels::convert_to_bf16(y.data(), y16.data(), static_cast<int64_t>(y16.size()));
  auto operand = [bf16](std::vector<float>& f, std::vector<bfloat16>& h) {
    return bf16 ? kernels::Operand(h.data()) : kernels::Operand(f.data());
  };
  const double forward = fastest_seconds(
      [&] { kernels::matmul(operand(x, x16), Trans::N, operand(w, w16), Trans::T, y.data(), M, N, K, b.data()); });
  const double backward = fastest_seconds([&] {
    kernels::matmul(operand(y, y16), Trans::N, operand(w, w16), Trans::N, x.data(), M, K, N);
    kernels::matmul(operand(y, y16), Trans::T, operand(x, x16), Trans::N, dw.data(), N, K, M, nullptr, /*accumulate=*/true);
    kernels::bias_backward(db.data(), y.data(), M, N);
  });
  const double flops = 2.0 * static_cast<double>(M * N * K);
  return {g, flops / forward, 2.0 * flops / backward};
}

// Loom's attention kernel (both batched products and the causal softmax) for the score
// product {s, s, d, b a / t}: as many whole heads as fit kMaxRows tokens.
plan::MeasuredRate measure_attention(const plan::Gemm& scores, int64_t heads_per_sequence) {
  const int64_t T = scores.m, HS = scores.k, NH = heads_per_sequence, C = NH * HS;
  const int64_t B = std::clamp<int64_t>(kMaxRows / T, 1, scores.batch / NH);
  std::vector<float> qkv = buffer(B * T * 3 * C, 0.01f), att = buffer(B * NH * T * T, 0.f), out = buffer(B * T * C, 0.f),
                     datt = buffer(B * NH * T * T, 0.f), dqkv = buffer(B * T * 3 * C, 0.f);
  const double forward = fastest_seconds([&] { kernels::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH); });
  const double backward = fastest_seconds([&] {
    kernels::attention_backward(dqkv.data(), datt.data(), out.data(), qkv.data(), att.data(), B, T, C, NH);
  });
  const double flops = 4.0 * static_cast<double>(B * NH * T * T * HS);  // the two products, forward
  return {scores, flops / forward, 2.0 * flops / backward};
}

// Bytes/s of a copy (read + write counted) between two buffers of a layer's activations'
// size, too large for the private caches: what LayerNorm, residual adds and Adam stream at.
double measure_copy_bandwidth() {
  const size_t n = size_t{16} << 20;
  std::vector<char> a(n, 1), b(n, 0);
  const double dt = fastest_seconds([&] { std::memcpy(b.data(), a.data(), n); });
  return 2.0 * static_cast<double>(n) / dt;
}

// GELU forward passes over a private 1 Mi-value buffer for `seconds` on the calling thread:
// values per second of wall time, and per second of the thread's CPU time.
struct Rates {
  double wall = 0, cpu = 0;
};
Rates gelu_rates(double seconds) {
  kernels::set_num_threads(1);  // per thread: OpenMP's thread count is a per-thread setting
  const int64_t n = int64_t{1} << 20;
  std::vector<float> x = buffer(n, 0.3f), y = buffer(n, 0.f);
  const auto wall0 = std::chrono::steady_clock::now();
  const double cpu0 = thread_seconds();
  int64_t passes = 0;
  double wall = 0;
  do {
    kernels::gelu_forward(y.data(), x.data(), n);
    ++passes;
    wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  } while (wall < seconds);
  const double values = static_cast<double>(passes * n);
  return {values / wall, values / std::max(thread_seconds() - cpu0, 1e-9)};
}

// The speed a rank gets, relative to an undisturbed core (the CPU-time rate of one thread
// alone): with one core busy (other jobs on the machine take their share of it) and with all
// `cores` busy at once (they also share caches, memory, SMT cores, or an overcommitted host).
// In three rounds, since on a shared machine both drift.
std::pair<double, double> measure_core_speeds(int64_t cores) {
  double undisturbed = 0, alone = 0, all = 0;
  for (int round = 0; round < 3; ++round) {
    const Rates one = gelu_rates(0.1);
    undisturbed += one.cpu;
    alone += one.wall;
    std::vector<double> rates(static_cast<size_t>(cores));
    std::vector<std::thread> threads;
    for (size_t i = 0; i < rates.size(); ++i) threads.emplace_back([&rates, i] { rates[i] = gelu_rates(0.1).wall; });
    for (std::thread& t : threads) t.join();
    for (double r : rates) all += r / static_cast<double>(cores);
  }
  return {std::clamp(alone / undisturbed, 0.05, 1.0), std::clamp(all / undisturbed, 0.05, 1.0)};
}

void add_unique(std::vector<plan::Gemm>& shapes, const plan::Gemm& g) {
  if (std::find(shapes.begin(), shapes.end(), g) == shapes.end()) shapes.push_back(g);
}

}  // namespace

plan::ClusterSpec measure_local_cluster(const plan::ModelSpec& model, const std::vector<plan::Layout>& layouts,
                                        int64_t ranks, plan::Precision precision) {
  plan::ClusterSpec c;
  c.name = "local";
  c.cores_per_node = std::max<int64_t>(1, sysconf(_SC_NPROCESSORS_ONLN));
  c.devices_per_node = std::max(c.cores_per_node, ranks);  // every rank runs on this machine
  c.memory_bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE) / c.devices_per_node;
  c.compute_units = 0;
  const bool bf16 = precision == plan::Precision::Bf16;
  c.precision = bf16 ? plan::Precision::Bf16 : plan::Precision::Fp32;
  const kernels::PrecisionScope scope(bf16 ? kernels::Precision::BF16 : kernels::Precision::F32);  // attention's products
  const int threads = kernels::num_threads();
  kernels::set_num_threads(1);
  std::vector<plan::Gemm> linear, scores;
  int64_t gelu_values = 1;
  for (const plan::Layout& l : layouts) {
    const plan::LayerGemms g = plan::layer_gemms(model, l);
    for (const plan::Gemm& s : g.linear) add_unique(linear, s);
    add_unique(linear, plan::head_gemm(model, l));
    if (std::find(scores.begin(), scores.end(), g.scores) == scores.end()) {
      scores.push_back(g.scores);
      c.attention_rates.push_back(measure_attention(g.scores, model.heads / (l.tensor_parallel_3d() ? l.row : l.tp)));
    }
    gelu_values = std::max(gelu_values, g.linear[2].m * g.linear[2].n);
  }
  for (const plan::Gemm& g : linear) {
    // Shapes that differ only beyond the rows timed share one measurement.
    const plan::Gemm timed{timed_rows(g), g.n, g.k};
    auto same = std::find_if(c.gemm_rates.begin(), c.gemm_rates.end(), [&](const plan::MeasuredRate& r) {
      return plan::Gemm{timed_rows(r.shape), r.shape.n, r.shape.k} == timed;
    });
    plan::MeasuredRate rate = same != c.gemm_rates.end() ? *same : measure_linear(g, bf16);
    rate.shape = g;
    c.gemm_rates.push_back(rate);
  }
  // The fastest GEMM measured stands for the peak (MFU and the roofline of unmeasured shapes).
  c.peak_flops = 0;
  for (const plan::MeasuredRate& r : c.gemm_rates) c.peak_flops = std::max(c.peak_flops, r.forward);
  c.gemm_peak_share = 1.0;
  const int64_t n = std::min<int64_t>(gelu_values, kMaxRows * 4 * model.hidden);
  std::vector<float> x = buffer(n, 0.3f), y = buffer(n, 0.f), dx = buffer(n, 0.f);
  c.gelu_forward_s = fastest_seconds([&] { kernels::gelu_forward(y.data(), x.data(), n); }) / static_cast<double>(n);
  c.gelu_backward_s = fastest_seconds([&] { kernels::gelu_backward(dx.data(), x.data(), y.data(), n); }) / static_cast<double>(n);
  c.memory_bandwidth = measure_copy_bandwidth();
  std::tie(c.alone_core_speed, c.shared_core_speed) = measure_core_speeds(c.cores_per_node);
  kernels::set_num_threads(threads);
  // Open MPI's shared-memory transport copies each message twice through a shared buffer, so
  // a link moves half the copy bandwidth, after ~2 us of latency (`loom bench comm` measures
  // both; bench/plan_vs_measured.sh passes them in).
  c.intra_node = {2e-6, 2.0 / c.memory_bandwidth};
  c.inter_node = c.intra_node;
  return c;
}

}  // namespace loom::apps
