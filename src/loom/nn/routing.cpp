#include "loom/nn/routing.hpp"

#include <algorithm>
#include <cmath>

#include "loom/error.hpp"

namespace loom::nn {

int64_t expert_capacity(double capacity_factor, int64_t K, int64_t T, int64_t E) {
  if (capacity_factor <= 0.0) return 0;
  return static_cast<int64_t>(std::ceil(capacity_factor * static_cast<double>(K * T) / static_cast<double>(E)));
}

bool capacity_never_drops(double capacity_factor, int64_t K, int64_t E) {
  // In doubles, f K >= E may round up from just below, but expert_capacity's ceil still
  // reaches T while f K T / E stays above T - 1: for any T short of 2^50.
  return capacity_factor <= 0.0 || capacity_factor * static_cast<double>(K) >= static_cast<double>(E);
}

namespace {

// Which of the (B, T, K) assignments `expert` fit their expert's capacity (1: kept), each
// sequence deciding alone: first choices before second ones, earlier tokens before later ones.
std::vector<uint8_t> within_capacity(const int32_t* expert, int64_t B, int64_t T, int64_t K, int64_t E,
                                     int64_t capacity) {
  std::vector<uint8_t> keep(static_cast<size_t>(B * T * K), 1);
  if (capacity == 0) return keep;
  std::vector<int64_t> taken(static_cast<size_t>(E));
  for (int64_t b = 0; b < B; ++b) {
    std::fill(taken.begin(), taken.end(), 0);
    for (int64_t j = 0; j < K; ++j)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t a = (b * T + t) * K + j;
        keep[static_cast<size_t>(a)] = taken[static_cast<size_t>(expert[a])]++ < capacity ? 1 : 0;
      }
  }
  return keep;
}

// The same for a sequence split over parts, T of its tokens here: every part's choices,
// gathered with the positions they stand at, rebuild each whole sequence's on every part,
// whose serial order decides. The payload is small (T (1 + B K) values a part) next to the
// activations the layer moves, and positions and expert indices are exact in fp32 (< 2^24).
std::vector<uint8_t> within_capacity(const int32_t* expert, int64_t B, int64_t T, int64_t K, int64_t E,
                                     int64_t capacity, const SequenceParts& parts) {
  const std::vector<int64_t> at = parts.positions(T);
  const int64_t block = T * (1 + B * K), P = parts.parts(), whole_T = T * P;
  check(whole_T < (int64_t{1} << 24) && E < (int64_t{1} << 24), "route_tokens: a sequence of ", whole_T,
        " tokens over ", E, " experts is past what its capacity gather carries exactly (2^24)");
  std::vector<float> mine(static_cast<size_t>(block));
  for (int64_t t = 0; t < T; ++t) mine[static_cast<size_t>(t)] = static_cast<float>(at[static_cast<size_t>(t)]);
  for (int64_t a = 0; a < B * T * K; ++a) mine[static_cast<size_t>(T + a)] = static_cast<float>(expert[a]);
  const std::vector<float> all = parts.gather(mine);
  check(static_cast<int64_t>(all.size()) == P * block, "route_tokens: gathered ", all.size(), " values from ", P,
        " parts, expected ", P * block);
  std::vector<int32_t> whole(static_cast<size_t>(B * whole_T * K), -1);
  for (int64_t p = 0; p < P; ++p) {
    const float* part = all.data() + p * block;
    for (int64_t t = 0; t < T; ++t) {
      const auto position = static_cast<int64_t>(part[t]);
      check(position >= 0 && position < whole_T, "route_tokens: a part's token stands at position ", position,
            " of a sequence of ", whole_T);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < K; ++j)
          whole[static_cast<size_t>((b * whole_T + position) * K + j)] =
              static_cast<int32_t>(part[T + (b * T + t) * K + j]);
    }
  }
  for (const int32_t e : whole) check(e >= 0 && e < E, "route_tokens: the parts' positions do not cover the sequence");
  const std::vector<uint8_t> whole_keep = within_capacity(whole.data(), B, whole_T, K, E, capacity);
  std::vector<uint8_t> keep(static_cast<size_t>(B * T * K));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < K; ++j)
        keep[static_cast<size_t>((b * T + t) * K + j)] =
            whole_keep[static_cast<size_t>((b * whole_T + at[static_cast<size_t>(t)]) * K + j)];
  return keep;
}

}  // namespace

Routing route_tokens(const Tensor& probs, int64_t B, int64_t T, int64_t K, double capacity_factor,
                     const SequenceParts& parts) {
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
  // Capacity per sequence, in (choice, token) order: first choices before second ones. Split
  // over parts, each part keeps what the whole sequence's order keeps.
  const int64_t capacity = expert_capacity(capacity_factor, K, T * parts.parts(), E);
  const std::vector<uint8_t> keep = capacity > 0 && parts.parts() > 1
                                        ? within_capacity(expert, B, T, K, E, capacity, parts)
                                        : within_capacity(expert, B, T, K, E, capacity);
  int32_t* row = r.row.i32();
  r.counts.assign(static_cast<size_t>(E), 0);
  for (int64_t a = 0; a < N * K; ++a) {
    row[a] = keep[static_cast<size_t>(a)] ? 0 : -1;
    if (keep[static_cast<size_t>(a)]) ++r.counts[static_cast<size_t>(expert[a])];
    else ++r.dropped;
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

// (B, E) choices per expert of each sequence (this part's tokens), then, with probs, (B, E)
// router probability sums; added over the sequence's parts.
std::vector<double> sequence_sums(const Tensor* probs, const Tensor& expert, int64_t B, int64_t T, int64_t E,
                                  const SequenceParts& parts) {
  const int64_t K = expert.size(1);
  std::vector<double> sums(static_cast<size_t>((probs != nullptr ? 2 : 1) * B * E), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    const int32_t* e = expert.i32() + b * T * K;
    for (int64_t a = 0; a < T * K; ++a) sums[static_cast<size_t>(b * E + e[a])] += 1.0;
    if (probs != nullptr)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < E; ++i) sums[static_cast<size_t>((B + b) * E + i)] += probs->f32()[(b * T + t) * E + i];
  }
  if (parts.parts() > 1) {  // counts are exact in fp32 (< 2^24)
    std::vector<float> v(sums.begin(), sums.end());
    parts.sum(v);
    sums.assign(v.begin(), v.end());
  }
  return sums;
}

}  // namespace

float load_balancing_loss(const Tensor& probs, const Tensor& expert, int64_t B, int64_t T, const SequenceParts& parts) {
  const int64_t E = probs.size(1), K = expert.size(1);
  const double whole = static_cast<double>(T * parts.parts());  // the sequence's tokens
  const std::vector<double> sums = sequence_sums(&probs, expert, B, T, E, parts);
  double total = 0.0;
  for (int64_t b = 0; b < B; ++b) {
    double s = 0.0;  // sum_i f_i P_i, f_i = count_i / (K T), P_i = sum_t p_ti / T
    for (int64_t e = 0; e < E; ++e)
      s += sums[static_cast<size_t>(b * E + e)] / (static_cast<double>(K) * whole) * sums[static_cast<size_t>((B + b) * E + e)] / whole;
    total += static_cast<double>(E) * s;
  }
  return static_cast<float>(total / static_cast<double>(B));
}

void load_balancing_loss_backward(Tensor& dprobs, const Tensor& expert, int64_t B, int64_t T, float scale,
                                  const SequenceParts& parts) {
  const int64_t E = dprobs.size(1), K = expert.size(1);
  const std::vector<double> counts = sequence_sums(nullptr, expert, B, T, E, parts);
  const double whole = static_cast<double>(T * parts.parts());
  // d/dp[b, t, i] of mean_b E sum_i f_i (1/T) sum_t p[b, t, i] = E f_i / (T B); a part's
  // tokens take parts / summed_parts times that (see the header).
  const double tokens = static_cast<double>(T * parts.summed_parts());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < E; ++e) {
        const double f = counts[static_cast<size_t>(b * E + e)] / (static_cast<double>(K) * whole);
        dprobs.f32()[(b * T + t) * E + e] += static_cast<float>(scale * static_cast<double>(E) * f / (tokens * static_cast<double>(B)));
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
