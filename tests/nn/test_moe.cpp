// The mixture of experts serially: the load-balancing loss's closed form under uniform
// routing, capacity dropping (which tokens, in which order, decided per sequence so any
// split of the batch drops the same ones; the factor from which none can), deterministic tie-breaking, and the GPT's MoE
// blocks (parameter count, the dense MLP accessor refusing), and one expert against the dense
// MLP in fp32 and bf16 (what it keeps, and its numbers bit for bit), and what the layer keeps
// under mixed precision. Exact comparisons: routing is integer bookkeeping; the aux loss of a
// uniform router is exactly representable.
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "loom/error.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/nn/experts.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/nn/mlp.hpp"
#include "loom/nn/moe.hpp"
#include "loom/nn/routing.hpp"
#include "test_util.hpp"

namespace loom::nn::moe_test {
namespace {

Tensor probs_of(const std::vector<std::vector<float>>& rows) {
  Tensor p = Tensor::empty({static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size())});
  for (size_t n = 0; n < rows.size(); ++n) std::copy(rows[n].begin(), rows[n].end(), p.f32() + n * rows[0].size());
  return p;
}

std::vector<int32_t> values(const Tensor& t) { return {t.i32(), t.i32() + t.numel()}; }

TEST(MoeRouting, UniformRoutingGivesAuxLossOneBeforeTheCoefficient) {
  MoeConfig config;
  config.experts = 4;
  config.top_k = 2;
  MoE moe(8, config);
  for (Parameter* p : moe.parameters()) p->value().fill_(0.1f);
  moe.router().weight().value().zero_();  // every probability 1/E
  Context ctx;
  moe.forward(Tensor::zeros({2, 5, 8}), ctx);
  const MoeStats s = moe.take_stats();
  EXPECT_EQ(s.aux_loss_sum, 1.0);
  // Ties go to the lower expert index: every token picks experts 0 and 1.
  ASSERT_EQ(s.load.size(), 4u);
  EXPECT_EQ(s.load[0], 10);
  EXPECT_EQ(s.load[1], 10);
  EXPECT_EQ(s.load[2], 0);
  EXPECT_EQ(s.load[3], 0);
  EXPECT_EQ(s.dropped, 0);
}

TEST(MoeRouting, CapacityDropsLaterTokensAndSecondChoicesFirst) {
  // One sequence of 4 tokens, 2 experts, top-2, f = 0.5: capacity ceil(0.5 * 2 * 4 / 2) = 2.
  // Tokens 0-2 prefer expert 0, token 3 expert 1.
  const Tensor probs = probs_of({{0.9f, 0.1f}, {0.8f, 0.2f}, {0.7f, 0.3f}, {0.4f, 0.6f}});
  const Routing r = route_tokens(probs, 1, 4, 2, 0.5);
  EXPECT_EQ(values(r.expert), (std::vector<int32_t>{0, 1, 0, 1, 0, 1, 1, 0}));
  // First choices in token order: expert 0 takes tokens 0 and 1, drops token 2's; expert 1
  // takes token 3. Second choices: expert 1 takes token 0's, then is full.
  std::vector<bool> kept;
  for (int32_t row : values(r.row)) kept.push_back(row >= 0);
  EXPECT_EQ(kept, (std::vector<bool>{true, true, true, false, false, false, true, false}));
  EXPECT_EQ(r.counts, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(r.dropped, 4);
  EXPECT_EQ(expert_capacity(0.0, 2, 4, 2), 0) << "f = 0 is dropless";
  EXPECT_EQ(route_tokens(probs, 1, 4, 2, 0.0).dropped, 0);
}

// An expert gets at most T of a sequence's assignments (a token's K choices are distinct):
// from f = E / K on, every length's capacity holds them all, in doubles too (E / K not
// representable, or f K rounded up to E from just below); under it some length drops.
TEST(MoeRouting, CapacityFromEOverKNeverDropsBelowItSomeLengthCan) {
  struct Row {
    double f;
    int64_t K, E;
  };
  const double just_below_10_3 = std::nextafter(10.0 / 3.0, 0.0);
  for (const Row r : {Row{2.0, 2, 4}, Row{4.0, 1, 4}, Row{10.0 / 3.0, 3, 10}, Row{just_below_10_3, 3, 10},
                      Row{8.0 / 3.0, 3, 8}, Row{3.5, 2, 7}, Row{0.0, 2, 4}, Row{5.0, 2, 4}}) {
    ASSERT_TRUE(capacity_never_drops(r.f, r.K, r.E)) << r.f << " " << r.K << " " << r.E;
    for (int64_t T = 1; T <= 100000; ++T)
      if (r.f > 0.0) ASSERT_GE(expert_capacity(r.f, r.K, T, r.E), T) << r.f << " " << r.K << " " << r.E;
  }
  for (const Row r : {Row{1.9, 2, 4}, Row{1.0, 1, 2}, Row{3.3, 3, 10}, Row{0.01, 2, 4}}) {
    EXPECT_FALSE(capacity_never_drops(r.f, r.K, r.E)) << r.f << " " << r.K << " " << r.E;
    int64_t T = 1;
    while (T < 1000 && expert_capacity(r.f, r.K, T, r.E) >= T) ++T;
    EXPECT_LT(T, 1000) << r.f << " " << r.K << " " << r.E << ": some length should drop";
  }
  // A sequence of 20 tokens all choosing experts 0 and 1: capacity 19 at f = 1.9 drops one
  // assignment of each, capacity 20 at f = 2 none.
  const Tensor probs = probs_of(std::vector<std::vector<float>>(20, {0.5f, 0.3f, 0.1f, 0.1f}));
  EXPECT_EQ(route_tokens(probs, 1, 20, 2, 1.9).dropped, 2);
  EXPECT_EQ(route_tokens(probs, 1, 20, 2, 2.0).dropped, 0);
}

TEST(MoeRouting, EachSequenceIsRoutedAloneSoAnySplitDropsTheSameTokens) {
  const int64_t T = 6, E = 3;
  std::vector<std::vector<float>> rows;
  const auto r = loom::testing::random_vector(2 * T * E, 5, 0.01f, 1.0f);
  for (int64_t n = 0; n < 2 * T; ++n) rows.emplace_back(r.begin() + n * E, r.begin() + (n + 1) * E);
  const Routing both = route_tokens(probs_of(rows), 2, T, 2, 0.6);
  std::vector<int32_t> kept_both;
  for (int32_t row : values(both.row)) kept_both.push_back(row >= 0);
  std::vector<int32_t> kept_apart;
  for (int b = 0; b < 2; ++b) {
    const Routing one = route_tokens(probs_of({rows.begin() + b * T, rows.begin() + (b + 1) * T}), 1, T, 2, 0.6);
    for (int32_t row : values(one.row)) kept_apart.push_back(row >= 0);
  }
  EXPECT_EQ(kept_both, kept_apart);
  EXPECT_GT(both.dropped, 0);
}

// Parts of a sequence, each holding the tokens at its own positions of it, simulated by one
// thread each: the gather is a real exchange between the threads.
struct Exchange {
  explicit Exchange(int64_t parts) : slots(static_cast<size_t>(parts)), written(parts), read(parts) {}
  std::vector<std::vector<float>> slots;
  std::barrier<> written, read;
};

class ThreadParts : public SequenceParts {
 public:
  ThreadParts(std::vector<int64_t> positions, int64_t me, Exchange& exchange)
      : positions_(std::move(positions)), me_(me), exchange_(exchange) {}
  int64_t parts() const override { return static_cast<int64_t>(exchange_.slots.size()); }
  std::vector<int64_t> positions(int64_t rows) const override {
    EXPECT_EQ(rows, static_cast<int64_t>(positions_.size()));
    return positions_;
  }
  std::vector<float> gather(const std::vector<float>& v) const override {
    exchange_.slots[static_cast<size_t>(me_)] = v;
    exchange_.written.arrive_and_wait();
    std::vector<float> all;
    for (auto part = exchange_.slots.rbegin(); part != exchange_.slots.rend(); ++part)  // any order the parts agree on
      all.insert(all.end(), part->begin(), part->end());
    exchange_.read.arrive_and_wait();
    return all;
  }

 private:
  std::vector<int64_t> positions_;
  int64_t me_;
  Exchange& exchange_;
};

// Each part's routing (its tokens' rows of probs, B sequences), or the error it stopped with.
std::vector<std::variant<Routing, std::string>> route_parts(const std::vector<std::vector<float>>& rows, int64_t B,
                                                            int64_t T, const std::vector<std::vector<int64_t>>& at,
                                                            int64_t K, double f) {
  const auto P = static_cast<int64_t>(at.size());
  Exchange exchange(P);
  std::vector<std::variant<Routing, std::string>> out(static_cast<size_t>(P));
  std::vector<std::thread> threads;
  for (int64_t p = 0; p < P; ++p)
    threads.emplace_back([&, p] {
      std::vector<std::vector<float>> mine;
      for (int64_t b = 0; b < B; ++b)
        for (const int64_t t : at[static_cast<size_t>(p)]) mine.push_back(rows[static_cast<size_t>(b * T + t)]);
      const ThreadParts parts(at[static_cast<size_t>(p)], p, exchange);
      const auto Tp = static_cast<int64_t>(at[static_cast<size_t>(p)].size());
      try {
        out[static_cast<size_t>(p)] = route_tokens(probs_of(mine), B, Tp, K, f, parts);
      } catch (const loom::Error& e) {
        out[static_cast<size_t>(p)] = std::string(e.what());
      }
    });
  for (auto& t : threads) t.join();
  return out;
}

// Layouts of a 12-token sequence: sequence parallelism's three consecutive chunks, context
// parallelism's zig-zag over 2 ranks (chunks 0 and 3, 1 and 2 of 4), cp 2 over tp 3 (each tp
// rank a third of its cp rank's two chunks, the middle one straddling both), and an arbitrary
// scatter.
std::vector<std::vector<int64_t>> layouts_of_twelve(const std::string& name) {
  if (name == "sp3") return {{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}};
  if (name == "cp2_zigzag") return {{0, 1, 2, 9, 10, 11}, {3, 4, 5, 6, 7, 8}};
  if (name == "cp2_tp3") return {{0, 1}, {2, 9}, {10, 11}, {3, 4}, {5, 6}, {7, 8}};
  return {{7, 0, 11}, {3, 10, 1}, {5, 8, 2}, {6, 4, 9}};
}

TEST(MoeRouting, ASequenceSplitIntoPartsKeepsWhatTheWholeSequenceKeeps) {
  const int64_t B = 2, T = 12, E = 4, K = 2;
  const auto r = loom::testing::random_vector(B * T * E, 9, 0.01f, 1.0f);
  std::vector<std::vector<float>> rows;
  for (int64_t n = 0; n < B * T; ++n) rows.emplace_back(r.begin() + n * E, r.begin() + (n + 1) * E);
  for (const std::string layout : {"sp3", "cp2_zigzag", "cp2_tp3", "scattered"})
    for (const double f : {0.5, 0.75, 1.0}) {
      const std::string what = layout + ", f " + std::to_string(f);
      const Routing whole = route_tokens(probs_of(rows), B, T, K, f);
      const std::vector<std::vector<int64_t>> at = layouts_of_twelve(layout);
      const auto parts = route_parts(rows, B, T, at, K, f);
      int64_t dropped = 0;
      std::vector<int64_t> counts(E, 0);
      for (size_t p = 0; p < at.size(); ++p) {
        ASSERT_TRUE(std::holds_alternative<Routing>(parts[p])) << what << ": " << std::get<std::string>(parts[p]);
        const Routing& part = std::get<Routing>(parts[p]);
        dropped += part.dropped;
        for (int64_t e = 0; e < E; ++e) counts[static_cast<size_t>(e)] += part.counts[static_cast<size_t>(e)];
        const auto Tp = static_cast<int64_t>(at[p].size());
        for (int64_t b = 0; b < B; ++b)
          for (int64_t t = 0; t < Tp; ++t)
            for (int64_t j = 0; j < K; ++j) {
              const int64_t position = at[p][static_cast<size_t>(t)];
              const int64_t here = (b * Tp + t) * K + j, there = (b * T + position) * K + j;
              ASSERT_EQ(part.expert.i32()[here], whole.expert.i32()[there]);
              ASSERT_EQ(part.row.i32()[here] >= 0, whole.row.i32()[there] >= 0)
                  << what << ", sequence " << b << ", token " << position << ", choice " << j;
            }
      }
      EXPECT_EQ(dropped, whole.dropped) << what;
      EXPECT_EQ(counts, whole.counts) << what;
      if (f == 0.5) {
        EXPECT_GT(whole.dropped, 0) << what;
      }
    }
}

// Parts whose positions do not cover the sequence (two claim one position, none the last): a
// clear error on every part, never a decision from a wrong order.
TEST(MoeRouting, PartsThatDoNotCoverTheSequenceAreAnError) {
  const std::vector<std::vector<float>> rows{{0.7f, 0.3f}, {0.6f, 0.4f}, {0.2f, 0.8f}, {0.1f, 0.9f}};
  const auto parts = route_parts(rows, 1, 4, {{0, 1}, {1, 2}}, 1, 1.0);
  for (const auto& part : parts) {
    ASSERT_TRUE(std::holds_alternative<std::string>(part));
    EXPECT_NE(std::get<std::string>(part).find("do not cover the sequence"), std::string::npos)
        << std::get<std::string>(part);
  }
}

TEST(MoeGpt, EveryNthBlockIsMoeAndTheParameterCountIncludesTheExperts) {
  GPTConfig c;
  c.vocab_size = 65;
  c.block_size = 8;
  c.n_layer = 4;
  c.n_head = 2;
  c.n_embd = 16;
  c.moe.experts = 4;
  c.moe.every = 2;
  GPT model(c, 1);
  EXPECT_EQ(model.blocks()[0]->moe(), nullptr);
  ASSERT_NE(model.blocks()[1]->moe(), nullptr);
  EXPECT_EQ(model.blocks()[3]->moe()->experts().fc_weight().shape(), (Shape{4, 64, 16}));
  EXPECT_EQ(model.num_parameters(), c.num_parameters());
  EXPECT_NE(loom::testing::error_of([&] { model.blocks()[1]->mlp(); }).find("mixture of experts"), std::string::npos);
}

// One expert computes what the dense MLP (fc, GELU, proj) computes, the same way, in fp32 and
// in bf16, where both keep bf16 copies of what backward reads (the rows, the pre-activations
// and the GELU outputs: half their fp32 bytes) and their GEMMs read the same bf16 operands.
// The experts' products take their row count at run time (kernels::Varying), another oneDNN
// kernel on this CPU than the dense layer's fixed-shape one, which may sum in another order:
// the output and every gradient agree within rtol/atol 1e-5 (fp32 rounding of sums of at most
// 32 terms of order 1: measured 1e-6), while a bf16 copy taken differently would leave errors
// of bf16's 2^-9 relative rounding, ~1e-3 on these values.
TEST(MoeExperts, OneExpertIsTheDenseMlpInEitherPrecision) {
  const int64_t R = 6, C = 8;
  for (const kernels::Precision p : {kernels::Precision::F32, kernels::Precision::BF16}) {
    const kernels::PrecisionScope precision(p);
    const std::string what(kernels::precision_name(p));
    MLP mlp(C);
    Experts experts(1, C, 0, 1);
    const std::vector<Parameter*> dense = mlp.parameters(), expert = experts.parameters();  // fc w, b; proj w, b
    ASSERT_EQ(dense.size(), expert.size());
    for (size_t i = 0; i < dense.size(); ++i) {
      ASSERT_EQ(dense[i]->numel(), expert[i]->numel()) << dense[i]->name();
      const std::vector<float> v = loom::testing::random_vector(dense[i]->numel(), 30 + i);
      std::copy(v.begin(), v.end(), dense[i]->value().f32());
      std::copy(v.begin(), v.end(), expert[i]->value().f32());
    }
    auto random = [](int64_t rows, int64_t cols, uint64_t seed) {
      Tensor t = Tensor::empty({rows, cols});
      const std::vector<float> v = loom::testing::random_vector(t.numel(), seed);
      std::copy(v.begin(), v.end(), t.f32());
      return t;
    };
    const Tensor x = random(R, C, 1), dy = random(R, C, 2);
    Context dense_ctx, expert_ctx;
    const Tensor y_dense = mlp.forward(x, dense_ctx), y_expert = experts.forward(x, expert_ctx);
    const int64_t value_bytes = p == kernels::Precision::BF16 ? 2 : 4;
    EXPECT_EQ(expert_ctx.bytes(), value_bytes * (R * C + 2 * R * 4 * C)) << what;
    EXPECT_EQ(expert_ctx.bytes(), dense_ctx.bytes()) << what;
    const Tensor dx_dense = mlp.backward(dy, dense_ctx), dx_expert = experts.backward(dy, expert_ctx);
    const double tol = 1e-5;
    EXPECT_TRUE(loom::testing::all_close(y_expert.f32(), y_dense.f32(), R * C, tol, tol, what + " output"));
    EXPECT_TRUE(loom::testing::all_close(dx_expert.f32(), dx_dense.f32(), R * C, tol, tol, what + " dx"));
    for (size_t i = 0; i < dense.size(); ++i)
      EXPECT_TRUE(loom::testing::all_close(expert[i]->grad().f32(), dense[i]->grad().f32(), dense[i]->numel(), tol,
                                           tol, what + " " + expert[i]->name()));
  }
}

// The layer keeps the experts' combined outputs for the gates' gradient in the run's
// activation precision: a bf16 copy under mixed precision (half the bytes, as every other
// activation a layer keeps), fp32 otherwise; the bf16 run's gradients stay close to fp32's.
TEST(MoeLayer, KeepsTheExpertOutputsInTheActivationPrecision) {
  const int64_t B = 2, T = 4, C = 8;
  MoeConfig config;
  config.experts = 4;
  config.top_k = 2;
  config.capacity_factor = 0;  // no limit
  auto random = [](const Shape& shape, uint64_t seed) {
    Tensor t = Tensor::empty(shape);
    const std::vector<float> v = loom::testing::random_vector(t.numel(), seed);
    std::copy(v.begin(), v.end(), t.f32());
    return t;
  };
  std::vector<Tensor> dx;
  for (const kernels::Precision p : {kernels::Precision::F32, kernels::Precision::BF16}) {
    const kernels::PrecisionScope precision(p);
    MoE moe(C, config);
    uint64_t seed = 40;
    for (Parameter* q : moe.parameters()) q->value().copy_from(random(q->shape(), ++seed));
    Context ctx;
    moe.forward(random({B, T, C}, 1), ctx);
    const Tensor& outs = ctx.saved(&moe, 5);
    EXPECT_EQ(outs.dtype(), p == kernels::Precision::BF16 ? DType::BF16 : DType::F32);
    EXPECT_EQ(outs.shape(), (Shape{B * T * config.top_k, C}));  // no capacity limit: every assignment kept
    dx.push_back(moe.backward(random({B, T, C}, 2), ctx));
  }
  // bf16 operands carry 8 significant bits (relative error up to 2^-8 each): a few of them in a row.
  EXPECT_TRUE(loom::testing::all_close(dx[1].f32(), dx[0].f32(), dx[0].numel(), 5e-2, 5e-2, "bf16 dx against fp32"));
}

// A top-1 router's gates are all 1, so its only gradient is the load-balancing loss's, a
// constant over a token's probabilities when the sequence's loads are equal: no gradient of
// the logits at all. It must come out exactly zero, not as rounding noise of its own in each
// layout (`loom verify --tp 6` found a router gradient 0.4 of its scale apart from the serial
// run's at such a step).
TEST(MoeLayer, ATop1RouterWithEqualLoadsHasExactlyZeroGradient) {
  const int64_t T = 16, C = 8;
  MoeConfig config;
  config.experts = 2;
  config.top_k = 1;
  auto random = [](const Shape& shape, uint64_t seed) {
    Tensor t = Tensor::empty(shape);
    const std::vector<float> v = loom::testing::random_vector(t.numel(), seed);
    std::copy(v.begin(), v.end(), t.f32());
    return t;
  };
  int balanced = 0;
  for (uint64_t input = 1; input <= 40; ++input) {
    MoE moe(C, config);
    uint64_t seed = 40;
    for (Parameter* q : moe.parameters()) q->value().copy_from(random(q->shape(), ++seed));
    for (Parameter* q : moe.parameters()) q->grad().zero_();
    Context ctx;
    moe.forward(random({1, T, C}, input), ctx);
    const MoeStats s = moe.take_stats();
    if (s.load[0] != s.load[1]) continue;
    ++balanced;
    moe.backward(random({1, T, C}, 1000 + input), ctx);
    const Tensor& g = moe.router().weight().grad();
    for (int64_t i = 0; i < g.numel(); ++i) ASSERT_EQ(g.f32()[i], 0.0f) << "input " << input << ", element " << i;
  }
  EXPECT_GE(balanced, 3);  // inputs that route half the tokens to each expert were found
}

TEST(MoeConfig, ImpossibleValuesAreNamed) {
  MoeConfig c;
  c.experts = 4;
  c.top_k = 5;
  EXPECT_NE(loom::testing::error_of([&] { c.validate(); }).find("moe_top_k must be in [1, moe_experts (4)]"),
            std::string::npos);
  c.top_k = 2;
  c.capacity_factor = -1;
  EXPECT_NE(loom::testing::error_of([&] { c.validate(); }).find("moe_capacity_factor must be >= 0"), std::string::npos);
}

}  // namespace
}  // namespace loom::nn::moe_test
