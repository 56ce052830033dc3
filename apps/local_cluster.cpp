#include "local_cluster.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
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
#include "loom/plan/gemm_cost.hpp"

namespace loom::apps {

namespace {

using kernels::Trans;

double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The largest data cache this core uses, in bytes: the last level, shared with other cores
// (sysfs's cache of cpu0 at the highest level; sysconf's figure where sysfs has none, which on
// some hosts is the whole package's, ten times what one core's group shares). At least 1 MiB.
int64_t last_level_cache_bytes() {
  int64_t bytes = 0;
  for (int index = 0;; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream type(dir + "type"), size(dir + "size");
    if (!type || !size) break;
    std::string kind, text;
    type >> kind;
    size >> text;
    if (kind == "Instruction" || text.empty()) continue;
    int64_t value = std::atoll(text.c_str());
    if (text.back() == 'K') value <<= 10;
    if (text.back() == 'M') value <<= 20;
    bytes = std::max(bytes, value);
  }
  if (bytes == 0) bytes = std::max(sysconf(_SC_LEVEL3_CACHE_SIZE), sysconf(_SC_LEVEL2_CACHE_SIZE));
  return std::max<int64_t>(bytes, int64_t{1} << 20);
}

// Overwrites a buffer twice the last-level cache: what a layer's backward reads (its saved
// activations, its weights) was last touched before the other layers' forward and backward
// ran, and a model's activations outgrow that cache, so it comes from memory.
void evict_caches() {
  static std::vector<char> junk(static_cast<size_t>(2 * last_level_cache_bytes()));
  std::memset(junk.data(), junk[0] + 1, junk.size());
}

// A kernel the planner prices, with the calling thread's CPU seconds of each timed run.
struct Probe {
  std::function<void()> run;
  std::vector<double> seconds;
  double median() const {
    std::vector<double> t = seconds;
    std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(t.size() / 2), t.end());
    return std::max(t[t.size() / 2], 1e-9);
  }
};

// Times a layer's kernels where a training step runs them: one round runs the forward
// probes in order, evicts the caches (the other layers' passes: a model's activations
// outgrow the last-level cache, so backward finds them in memory), then the backward probes,
// each kernel timed between the others. A round untimed first (it creates the oneDNN
// primitives), then 3-7 timed rounds, fewer when they take long; each kernel's figure is its
// median. Timed alone after a cache flush, the best of a few runs, a 4-layer model's GEMMs,
// attention and GELU ran 1.1x, 1.5x and 1.6-2x as fast as the same calls inside its training
// step on a Zen 5 host: the other kernels between two calls leave the caches, and whatever
// else a core keeps warm for a kernel, as a step does; a flush alone does not.
void run_rounds(std::vector<Probe*>& forward, std::vector<Probe*>& backward) {
  auto round = [&](bool timed) {
    for (auto* half : {&forward, &backward}) {
      if (half == &backward) evict_caches();
      for (Probe* p : *half) {
        const double t0 = thread_seconds();
        p->run();
        if (timed) p->seconds.push_back(thread_seconds() - t0);
      }
    }
  };
  round(false);
  double spent = 0;
  for (int r = 0; r < 7 && (r < 3 || spent < 0.5); ++r) {
    const double t0 = thread_seconds();
    round(true);
    spent += thread_seconds() - t0;
  }
}

std::vector<float> buffer(int64_t n, float value) { return std::vector<float>(static_cast<size_t>(n), value); }

// Rows (tokens) beyond a few thousand only repeat the same kernel: a GEMM's rate and a
// pass's cost per value have long stopped changing, so larger shapes are timed on fewer rows:
// at most kMaxRows, and for wide matrices (an LM head over a large vocabulary) about
// kMaxFlops, but never fewer than the rows from which matmul reorders its B operand
// (kernels::kRepackMinRows): below them it takes another path, and gpt2-small's LM head timed
// on 256 rows ran its backward 25% slower than on the 1024 a step gives it.
constexpr int64_t kMaxRows = 2048, kMinRows = kernels::kRepackMinRows;
constexpr double kMaxFlops = 1e9;

int64_t timed_rows(const plan::Gemm& g) {
  const auto by_flops = static_cast<int64_t>(kMaxFlops / (2.0 * static_cast<double>(g.n * g.k)));
  return std::min(g.m, std::clamp(by_flops, kMinRows, kMaxRows));
}

// A Linear's three products as nn::Linear runs them: forward y = x W^T + b; backward dx = dy W
// (a buffer of its own, as a step's), dW += dy^T x and the bias gradient. Mixed precision
// reads bf16 copies of the input, the weight and the output's gradient. Its runs point at its
// own buffers: neither copied nor moved.
struct LinearProbe {
  plan::Gemm shape;
  int64_t M, N, K;
  std::vector<float> x, w, b, y, dx, dw, db;  // x and dx (M, K), W (N, K), y (M, N)
  std::vector<bfloat16> x16, w16, y16;
  Probe forward, backward;

  LinearProbe(const plan::Gemm& g, bool bf16)
      : shape(g), M(timed_rows(g)), N(g.n), K(g.k), x(buffer(M * K, 0.5f)), w(buffer(N * K, 0.25f)),
        b(buffer(N, 0.1f)), y(buffer(M * N, 0.f)), dx(buffer(M * K, 0.f)), dw(buffer(N * K, 0.f)), db(buffer(N, 0.f)),
        x16(bf16 ? x.size() : 0), w16(bf16 ? w.size() : 0), y16(bf16 ? y.size() : 0) {
    kernels::convert_to_bf16(x.data(), x16.data(), static_cast<int64_t>(x16.size()));
    kernels::convert_to_bf16(w.data(), w16.data(), static_cast<int64_t>(w16.size()));
    kernels::convert_to_bf16(y.data(), y16.data(), static_cast<int64_t>(y16.size()));
    auto operand = [bf16](std::vector<float>& f, std::vector<bfloat16>& h) {
      return bf16 ? kernels::Operand(h.data()) : kernels::Operand(f.data());
    };
    const kernels::Operand xo = operand(x, x16), wo = operand(w, w16), yo = operand(y, y16);
    forward.run = [this, xo, wo] { kernels::matmul(xo, Trans::N, wo, Trans::T, y.data(), M, N, K, b.data()); };
    backward.run = [this, xo, wo, yo] {
      kernels::matmul(yo, Trans::N, wo, Trans::N, dx.data(), M, K, N);
      kernels::matmul(yo, Trans::T, xo, Trans::N, dw.data(), N, K, M, nullptr, /*accumulate=*/true);
      kernels::bias_backward(db.data(), y.data(), M, N);
    };
  }
  plan::MeasuredRate rate() const {
    const double flops = 2.0 * static_cast<double>(M * N * K);
    return {shape, flops / forward.median(), 2.0 * flops / backward.median()};
  }
  LinearProbe(const LinearProbe&) = delete;
  LinearProbe& operator=(const LinearProbe&) = delete;
};

// Loom's attention kernel (both batched products and the causal softmax) for the score
// product {s, s, d, b a / t}, on as many whole heads as fit kMaxRows tokens, keeping for
// backward what nn::CausalAttention keeps: the probabilities in fp32; in bf16 each row's
// log-sum-exp (backward recomputes them), reading q, k, v from their bf16 copy.
struct AttentionProbe {
  plan::Gemm scores;
  int64_t B, T, C, NH;
  std::vector<float> qkv, att, lse, out, datt, dqkv;
  std::vector<bfloat16> qkv16;
  Probe forward, backward;

  AttentionProbe(const plan::Gemm& s, int64_t heads_per_sequence, bool bf16)
      : scores(s), B(std::clamp<int64_t>(kMaxRows / s.m, 1, s.batch / heads_per_sequence)), T(s.m),
        C(heads_per_sequence * s.k), NH(heads_per_sequence), qkv(buffer(B * T * 3 * C, 0.01f)),
        att(buffer(bf16 ? 0 : B * NH * T * T, 0.f)), lse(buffer(bf16 ? B * NH * T : 0, 0.f)),
        out(buffer(B * T * C, 0.f)), datt(buffer(bf16 ? 0 : B * NH * T * T, 0.f)), dqkv(buffer(B * T * 3 * C, 0.f)),
        qkv16(bf16 ? qkv.size() : 0) {
    kernels::convert_to_bf16(qkv.data(), qkv16.data(), static_cast<int64_t>(qkv16.size()));
    const kernels::Operand q = bf16 ? kernels::Operand(qkv16.data()) : kernels::Operand(qkv.data());
    float* a = att.empty() ? nullptr : att.data();
    float* da = datt.empty() ? nullptr : datt.data();
    float* l = lse.empty() ? nullptr : lse.data();
    forward.run = [this, q, a, l] { kernels::attention_forward(out.data(), a, q, B, T, C, NH, l); };
    backward.run = [this, q, a, da, l] { kernels::attention_backward(dqkv.data(), da, out.data(), q, a, B, T, C, NH, l); };
  }
  AttentionProbe(const AttentionProbe&) = delete;
  AttentionProbe& operator=(const AttentionProbe&) = delete;
  plan::MeasuredRate rate() const {
    const double flops = 4.0 * static_cast<double>(B * NH * T * T * scores.k);  // the two products, forward
    return {scores, flops / forward.median(), 2.0 * flops / backward.median()};
  }
};

// GELU as nn::MLP runs it: forward on the fc product's output just written (`hidden`, fc's
// probe's y), backward in place on the gradient the second projection's backward just wrote
// (`grad`, that probe's dx), reading `hidden` again.
struct GeluProbe {
  int64_t n;
  float *hidden, *grad;
  std::vector<float> y;
  Probe forward, backward;

  GeluProbe(int64_t values, float* fc_output, float* proj_input_gradient)
      : n(values), hidden(fc_output), grad(proj_input_gradient), y(buffer(n, 0.f)) {
    forward.run = [this] { kernels::gelu_forward(y.data(), hidden, n); };
    backward.run = [this] { kernels::gelu_backward(grad, hidden, grad, n); };
  }
  GeluProbe(const GeluProbe&) = delete;
  GeluProbe& operator=(const GeluProbe&) = delete;
};

// Bytes/s of a copy (read + write counted) between two buffers each twice the last-level
// cache: what LayerNorm, residual adds and Adam stream at over a step's activations and
// parameters, which come from memory (a copy within the last-level cache ran 1.9x as fast).
double measure_copy_bandwidth() {
  const auto n = static_cast<size_t>(2 * last_level_cache_bytes());
  std::vector<char> a(n, 1), b(n, 0);
  double fastest = 1e30;  // a busy machine only ever slows a copy down
  for (int i = 0; i < 4; ++i) {
    const double t0 = thread_seconds();
    std::memcpy(b.data(), a.data(), n);
    if (i > 0) fastest = std::min(fastest, thread_seconds() - t0);  // the first copy maps b's pages
  }
  return 2.0 * static_cast<double>(n) / std::max(fastest, 1e-9);
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
  // Each distinct layer's kernels timed in rounds as a step runs them (run_rounds); a layout
  // whose kernels were all timed already (the same shapes up to the rows timed) adds none.
  std::vector<plan::MeasuredRate> timed_linear;  // by the shape timed
  int64_t gelu_timed = 0;                        // the values of the largest GELU timed
  auto timed_shape = [](const plan::Gemm& g) { return plan::Gemm{timed_rows(g), g.n, g.k}; };
  auto timed_rate = [&](const plan::Gemm& g) { return plan::find_rate(timed_linear, timed_shape(g)); };
  // A layer's four Linear products and the LM head's.
  auto products = [&](const plan::Layout& l) {
    const plan::LayerGemms g = plan::layer_gemms(model, l);
    return std::array<plan::Gemm, 5>{g.linear[0], g.linear[1], g.linear[2], g.linear[3], plan::head_gemm(model, l)};
  };
  for (const plan::Layout& l : layouts) {
    const plan::LayerGemms g = plan::layer_gemms(model, l);
    const std::array<plan::Gemm, 5> gemms = products(l);
    const int64_t gelu_values = timed_rows(g.linear[2]) * g.linear[2].n;
    const bool attention_timed = plan::find_rate(c.attention_rates, g.scores) != nullptr;
    if (gelu_values <= gelu_timed && attention_timed &&
        std::all_of(gemms.begin(), gemms.end(), [&](const plan::Gemm& s) { return timed_rate(s) != nullptr; }))
      continue;
    // The LM head, the largest product, is timed once for all layouts that share its shape.
    const bool head_timed = timed_rate(gemms[4]) != nullptr;
    std::vector<std::unique_ptr<LinearProbe>> linear;
    for (size_t i = 0; i < (head_timed ? 4u : 5u); ++i) linear.push_back(std::make_unique<LinearProbe>(gemms[i], bf16));
    AttentionProbe attention(g.scores, model.heads / (l.tensor_parallel_3d() ? l.row : l.tp), bf16);
    GeluProbe gelu(gelu_values, linear[2]->y.data(), linear[3]->dx.data());  // fc's y, proj's dx: (M, 4h/t)
    // Forward: qkv, attention, projection, fc, GELU, projection, then the LM head; backward
    // the other way round.
    std::vector<Probe*> forward{&linear[0]->forward, &attention.forward, &linear[1]->forward, &linear[2]->forward,
                                &gelu.forward, &linear[3]->forward};
    std::vector<Probe*> backward{&linear[3]->backward, &gelu.backward, &linear[2]->backward, &linear[1]->backward,
                                 &attention.backward, &linear[0]->backward};
    if (!head_timed) {
      forward.push_back(&linear[4]->forward);
      backward.insert(backward.begin(), &linear[4]->backward);
    }
    run_rounds(forward, backward);
    for (const auto& p : linear)
      if (timed_rate(p->shape) == nullptr) {
        plan::MeasuredRate rate = p->rate();
        rate.shape = timed_shape(p->shape);
        timed_linear.push_back(rate);
      }
    if (!attention_timed) c.attention_rates.push_back(attention.rate());
    if (gelu_values > gelu_timed) {
      gelu_timed = gelu_values;
      c.gelu_forward_s = gelu.forward.median() / static_cast<double>(gelu_values);
      c.gelu_backward_s = gelu.backward.median() / static_cast<double>(gelu_values);
    }
  }
  // Every shape the layouts use, at the rate of the shape timed for it.
  for (const plan::Layout& l : layouts)
    for (const plan::Gemm& s : products(l)) {
      if (plan::find_rate(c.gemm_rates, s) != nullptr) continue;
      plan::MeasuredRate rate = *timed_rate(s);
      rate.shape = s;
      c.gemm_rates.push_back(rate);
    }
  // The fastest GEMM measured stands for the peak (MFU and the roofline of unmeasured shapes).
  c.peak_flops = 0;
  for (const plan::MeasuredRate& r : c.gemm_rates) c.peak_flops = std::max(c.peak_flops, r.forward);
  c.gemm_peak_share = 1.0;
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
