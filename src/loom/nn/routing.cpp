#include "loom/nn/routing.hpp"

#include <algorithm>
#include <cmath>

#include "loom/error.hpp"

namespace loom::nn {

int64_t expert_capacity(double capacity_factor, int64_t K, int64_t T, int64_t E) {
  if (capacity_factor <= 0.0) return 0;
  return static_cast<int64_t>(std::ceil(capacity_factor * static_cast<double>(K * T) / static_cast<double>(E)));
}

Routing route_tokens(const Tensor& probs, int64_t B, int64_t T, int64_t K, double capacity_factor) {
  const int64_t N = B * T, E = probs.size(1);
  check(probs.size(0) == N && K >= 1 && K <= E, "route_tokens: probs ", shape_str(probs.shape()), " for B ", B, " T ",
        T, " K ", K);
  Routing r;
  r.expert = Tensor::empty({N, K}, DType::I32);
  r.gate = Tensor::empty({N, K});
  r.row = Tensor::empty({N, K}, DType::I32);
  const float* p = probs.f32();
  int32_t* expert = r.expert.i32();
  float* gate = r.gate.f32();
  for (int64_t n = 0; n < N; ++n) {
    const float* pn = p + n * E;
    int32_t* en = expert + n * K;
    float sum = 0.0f;
    for (int64_t j = 0; j < K; ++j) {
      int32_t best = -1;  // highest probability not yet taken; the lower index on a tie
      for (int32_t e = 0; e < E; ++e) {
        bool taken = false;
        for (int64_t i = 0; i < j; ++i) taken = taken || en[i] == e;
        if (!taken && (best < 0 || pn[e] > pn[best])) best = e;
      }
      en[j] = best;
      sum += pn[best];
    }
    for (int64_t j = 0; j < K; ++j) gate[n * K + j] = pn[en[j]] / sum;
  }
  // Capacity per sequence, in (choice, token) order: first choices before second ones.
  const int64_t capacity = expert_capacity(capacity_factor, K, T, E);
  int32_t* row = r.row.i32();
  r.counts.assign(static_cast<size_t>(E), 0);
  std::vector<int64_t> taken(static_cast<size_t>(E));
  for (int64_t b = 0; b < B; ++b) {
    std::fill(taken.begin(), taken.end(), 0);
    for (int64_t j = 0; j < K; ++j)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t a = (b * T + t) * K + j;
        int64_t& used = taken[static_cast<size_t>(expert[a])];
        const bool keep = capacity == 0 || used < capacity;
        row[a] = keep ? 0 : -1;
        if (keep) ++used, ++r.counts[static_cast<size_t>(expert[a])];
        else ++r.dropped;
      }
  }
  // Number the kept rows expert by expert, each expert's in (sequence, choice, token) order.
  std::vector<int64_t> next(static_cast<size_t>(E), 0);
  for (int64_t e = 1; e < E; ++e) next[static_cast<size_t>(e)] = next[static_cast<size_t>(e - 1)] + r.counts[static_cast<size_t>(e - 1)];
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < K; ++j)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t a = (b * T + t) * K + j;
        if (row[a] >= 0) row[a] = static_cast<int32_t>(next[static_cast<size_t>(expert[a])]++);
      }
  return r;
}

namespace {

// f (E): share of sequence b's K T choices that picked each expert.
std::vector<double> choice_shares(const Tensor& expert, int64_t b, int64_t T, int64_t E) {
  const int64_t K = expert.size(1);
  std::vector<double> f(static_cast<size_t>(E), 0.0);
  const int32_t* e = expert.i32() + b * T * K;
  for (int64_t a = 0; a < T * K; ++a) f[static_cast<size_t>(e[a])] += 1.0;
  for (double& x : f) x /= static_cast<double>(T * K);
  return f;
}

}  // namespace

float load_balancing_loss(const Tensor& probs, const Tensor& expert, int64_t B, int64_t T) {
  const int64_t E = probs.size(1);
  double total = 0.0;
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<double> f = choice_shares(expert, b, T, E);
    std::vector<double> P(static_cast<size_t>(E), 0.0);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < E; ++e) P[static_cast<size_t>(e)] += probs.f32()[(b * T + t) * E + e];
    double s = 0.0;
    for (int64_t e = 0; e < E; ++e) s += f[static_cast<size_t>(e)] * P[static_cast<size_t>(e)] / static_cast<double>(T);
    total += static_cast<double>(E) * s;
  }
  return static_cast<float>(total / static_cast<double>(B));
}

void load_balancing_loss_backward(Tensor& dprobs, const Tensor& expert, int64_t B, int64_t T, float scale) {
  const int64_t E = dprobs.size(1);
  // d/dp[b, t, i] of mean_b E sum_i f_i (1/T) sum_t p[b, t, i] = E f_i / (T B).
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<double> f = choice_shares(expert, b, T, E);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < E; ++e)
        dprobs.f32()[(b * T + t) * E + e] +=
            static_cast<float>(scale * static_cast<double>(E) * f[static_cast<size_t>(e)] / static_cast<double>(T * B));
  }
}

void gate_backward(Tensor& dprobs, const Tensor& probs, const Tensor& expert, const Tensor& gate, const Tensor& dgate) {
  const int64_t N = expert.size(0), K = expert.size(1), E = probs.size(1);
  // g_j = p_j / S with S = sum_i p_i over the chosen experts: dp_j = (dg_j - sum_i dg_i g_i) / S.
  for (int64_t n = 0; n < N; ++n) {
    const int32_t* e = expert.i32() + n * K;
    const float *g = gate.f32() + n * K, *dg = dgate.f32() + n * K;
    float S = 0.0f, weighted = 0.0f;
    for (int64_t j = 0; j < K; ++j) S += probs.f32()[n * E + e[j]], weighted += dg[j] * g[j];
    for (int64_t j = 0; j < K; ++j) dprobs.f32()[n * E + e[j]] += (dg[j] - weighted) / S;
  }
}

}  // namespace loom::nn
