// Causal attention against a naive per-head twin in double (forward, att, backward),
// finite differences through the fp32 forward, and bit-identical 2-thread runs. Sizes cover
// one causal block (T = 5), several (T = 128: 2 x 64 rows), a ragged last block (T = 200:
// 67 + 67 + 66 rows, and rows that end inside a 16-lane chunk) and both kinds of head groups
// (T >= 1024); the path that keeps no probabilities recomputes them bit for bit.
#include <gtest/gtest.h>

#include <omp.h>

#include <array>
#include <cmath>
#include <vector>

#include "loom/kernels/attention.hpp"
#include "loom/kernels/precision.hpp"
#include "test_util.hpp"

namespace loom::kernels {
namespace {

using loom::testing::all_close;
using loom::testing::central_differences;
using loom::testing::expect_deterministic_across_threads;
using loom::testing::random_vector;

struct Ref {
  std::vector<float> out, att, dqkv, lse;  // lse (B, NH, T): the rows' log-sum-exp of the scaled scores
};

double bf16_value(double x) { return to_f32(to_bf16(static_cast<float>(x))); }

// One head at a time, scores / softmax / weighted sum written out in double. With
// bf16_products, the GEMM operands that bf16 mixed precision rounds are rounded the same way:
// forward's unnormalised exp-scores where they multiply V, backward's probabilities where they
// multiply dO, and dS where it multiplies K or Q (the caller rounds q, k, v and dout);
// everything else stays double. Under dropout the probabilities multiply V (and dO, for dV)
// times their mask (0 or 1 / (1 - p), as the kernel draws it) and dP is masked likewise; with
// bf16 products the mask's 0 or 1 multiplies the rounded operand and 1 / (1 - p) the product.
Ref reference(const std::vector<float>& qkv, const std::vector<float>& dout, int64_t B, int64_t T,
              int64_t C, int64_t NH, bool bf16_products = false, const AttentionDropout& drop = {}) {
  auto operand = [bf16_products](double x) { return bf16_products ? bf16_value(x) : x; };
  const int64_t HS = C / NH, C3 = 3 * C;
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  Ref r{std::vector<float>(B * T * C), std::vector<float>(B * NH * T * T, 0.0f),
        std::vector<float>(B * T * C3, 0.0f), std::vector<float>(B * NH * T)};
  std::vector<double> dq(B * T * C3, 0.0);  // (B, T, 3C) accumulated in double
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      auto q = [&](int64_t t, int64_t d) -> double { return qkv[(b * T + t) * C3 + h * HS + d]; };
      auto k = [&](int64_t t, int64_t d) -> double { return qkv[(b * T + t) * C3 + C + h * HS + d]; };
      auto v = [&](int64_t t, int64_t d) -> double { return qkv[(b * T + t) * C3 + 2 * C + h * HS + d]; };
      auto dO = [&](int64_t t, int64_t d) -> double { return dout[(b * T + t) * C + h * HS + d]; };
      std::vector<double> P(T * T, 0.0), M(T * T, 1.0);  // M: the dropout mask
      if (drop.active())
        for (int64_t i = 0; i < T; ++i) {
          std::vector<float> row(i + 1, 1.0f);
          drop.apply(row.data(), i + 1, b, h, i, drop.scale());
          for (int64_t j = 0; j <= i; ++j) M[i * T + j] = row[j];
        }
      for (int64_t i = 0; i < T; ++i) {
        double mx = -INFINITY;
        std::vector<double> s(i + 1);
        for (int64_t j = 0; j <= i; ++j) {
          s[j] = 0.0;
          for (int64_t d = 0; d < HS; ++d) s[j] += q(i, d) * k(j, d);
          s[j] *= scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j <= i; ++j) sum += std::exp(s[j] - mx);
        r.lse[(b * NH + h) * T + i] = static_cast<float>(mx + std::log(sum));
        for (int64_t j = 0; j <= i; ++j) P[i * T + j] = std::exp(s[j] - mx) / sum;
        for (int64_t j = 0; j < T; ++j) r.att[((b * NH + h) * T + i) * T + j] = static_cast<float>(P[i * T + j]);
        // With bf16 products V is multiplied by the unnormalised exp-scores, rounded, and each
        // output row divided by its sum afterwards (FlashAttention's order).
        for (int64_t d = 0; d < HS; ++d) {
          double o = 0.0;
          for (int64_t j = 0; j <= i; ++j)
            o += (bf16_products ? bf16_value(std::exp(s[j] - mx)) * v(j, d) / sum : P[i * T + j] * v(j, d)) * M[i * T + j];
          r.out[(b * T + i) * C + h * HS + d] = static_cast<float>(o);
        }
      }
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> dP(i + 1);
        double dot = 0.0;
        for (int64_t j = 0; j <= i; ++j) {
          dP[j] = 0.0;
          for (int64_t d = 0; d < HS; ++d) dP[j] += dO(i, d) * v(j, d);
          dP[j] *= M[i * T + j];
          dot += P[i * T + j] * dP[j];
        }
        for (int64_t j = 0; j <= i; ++j) {
          const double dS = operand(P[i * T + j] * (dP[j] - dot));
          for (int64_t d = 0; d < HS; ++d) {
            dq[(b * T + i) * C3 + h * HS + d] += dS * k(j, d) * scale;
            dq[(b * T + j) * C3 + C + h * HS + d] += dS * q(i, d) * scale;
            dq[(b * T + j) * C3 + 2 * C + h * HS + d] += operand(P[i * T + j]) * M[i * T + j] * dO(i, d);
          }
        }
      }
    }
  }
  for (size_t i = 0; i < dq.size(); ++i) r.dqkv[i] = static_cast<float>(dq[i]);
  return r;
}

void check_against_reference(int64_t B, int64_t T, int64_t C, int64_t NH) {
  // Tolerance: rtol 1e-4, atol 2e-6 (fp32 GEMMs over K <= T against double).
  const auto qkv = random_vector(B * T * 3 * C, 100 + T, -2.0f, 2.0f);
  const auto dout = random_vector(B * T * C, 200 + T);
  const Ref ref = reference(qkv, dout, B, T, C, NH);
  // NaN everywhere: every output element must be written, and no GEMM or softmax may read
  // an entry it did not write first (a NaN would spread).
  std::vector<float> out(B * T * C, NAN), att(B * NH * T * T, NAN), datt(B * NH * T * T, NAN);
  std::vector<float> dqkv(B * T * 3 * C, NAN);
  attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  EXPECT_TRUE(all_close(out, ref.out, 1e-4, 2e-6, "out"));
  EXPECT_TRUE(all_close(att, ref.att, 1e-4, 2e-6, "att"));
  for (int64_t bh = 0; bh < B * NH; ++bh)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = i + 1; j < T; ++j)
        ASSERT_EQ(att[(bh * T + i) * T + j], 0.0f) << "att above the diagonal at bh " << bh << " i " << i
                                                   << " j " << j;
  attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
  EXPECT_TRUE(all_close(dqkv, ref.dqkv, 1e-4, 2e-6, "dqkv"));
}

// Attention dropout (p 0.2) against the twin given the kernel's masks, over one causal block,
// several, ragged ones and both kinds of head groups, seen from a later batch row and head (as
// a dp and tp rank sees it) and from later query and key positions (a second chunk of a
// sequence, as ring attention's diagonal blocks see it); att keeps the undropped
// probabilities; backward overwrites att with the dropped ones. Same tolerances as without.
// A mask drawn from other indices (a block's rows, a group's heads) is off by O(0.1-1).
void check_dropout_against_reference(int64_t B, int64_t T, int64_t C, int64_t NH) {
  const AttentionDropout drop{.p = 0.2f, .key = 77, .first_row = 5, .heads = 3 * NH, .first_head = NH,
                              .positions = 2 * T, .query0 = T, .key0 = T};
  const auto qkv = random_vector(B * T * 3 * C, 300 + T, -2.0f, 2.0f);
  const auto dout = random_vector(B * T * C, 400 + T);
  const Ref ref = reference(qkv, dout, B, T, C, NH, false, drop);
  std::vector<float> out(B * T * C, NAN), att(B * NH * T * T, NAN), datt(B * NH * T * T, NAN);
  std::vector<float> dqkv(B * T * 3 * C, NAN);
  attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, nullptr, drop);
  EXPECT_TRUE(all_close(out, ref.out, 1e-4, 2e-6, "out"));
  EXPECT_TRUE(all_close(att, ref.att, 1e-4, 2e-6, "att (undropped)"));
  attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH, nullptr, drop);
  EXPECT_TRUE(all_close(dqkv, ref.dqkv, 1e-4, 2e-6, "dqkv"));
  const Ref plain = reference(qkv, dout, B, T, C, NH);
  EXPECT_FALSE(all_close(out, plain.out, 1e-2, 1e-3, "out without dropout")) << "the mask changed nothing";
}

TEST(Attention, DropoutMatchesNaiveTwin) {
  check_dropout_against_reference(2, 5, 12, 3);
  check_dropout_against_reference(2, 128, 32, 2);
  check_dropout_against_reference(1, 200, 24, 3);
  check_dropout_against_reference(2, 1100, 16, 4);
}

TEST(Attention, MatchesNaiveTwinSmall) { check_against_reference(2, 5, 12, 3); }
TEST(Attention, MatchesNaiveTwinSeveralCausalBlocks) { check_against_reference(2, 128, 32, 2); }
TEST(Attention, MatchesNaiveTwinRaggedBlocks) { check_against_reference(1, 200, 24, 3); }
TEST(Attention, MatchesNaiveTwinSingleToken) { check_against_reference(3, 1, 8, 2); }
// Long sequences are processed in head groups of <= 16 MiB of scores: T = 1024 with NH = 2
// gives groups of 2 sequences (3 = 2 + 1); T = 1100 with NH = 4 splits each sequence's
// heads (3 + 1). Tiny HS keeps the double twin cheap.
TEST(Attention, MatchesNaiveTwinGroupsOfSequences) { check_against_reference(3, 1024, 8, 2); }
TEST(Attention, MatchesNaiveTwinGroupsOfHeads) { check_against_reference(2, 1100, 16, 4); }

// The bf16 path (attention_bf16.hpp: dense per-block operands, dK and dV summed block by block)
// against the twin with the same roundings, from bf16 q, k, v as the layer passes them.
// Tolerance: the kernel's probabilities differ from the twin's by fp32 rounding and fast_exp
// (~1e-7 relative), which can move a value rounded to bf16 by one step (2^-8 relative) at a
// tie, and the twin sums in double what the kernel sums in fp32. Measured: at most 3.4e-4
// absolute (T = 1100; 3e-5 at T = 128) on outputs and gradients of order 0.1-1, so rtol 2e-3 +
// atol 1e-3. A block's missing or doubled share of dK or dV is off by O(0.1-1).
void check_bf16_against_reference(int64_t B, int64_t T, int64_t C, int64_t NH) {
  auto rounded = [](std::vector<float> x) {
    for (float& e : x) e = to_f32(to_bf16(e));
    return x;
  };
  const auto qkv = rounded(random_vector(B * T * 3 * C, 500 + T, -2.0f, 2.0f));
  const auto dout = rounded(random_vector(B * T * C, 600 + T));
  const Ref ref = reference(qkv, dout, B, T, C, NH, /*bf16_products=*/true);
  std::vector<bfloat16> qkv_bf16(qkv.size());
  convert_to_bf16(qkv.data(), qkv_bf16.data(), static_cast<int64_t>(qkv.size()));
  std::vector<float> out(B * T * C, NAN), dqkv(B * T * 3 * C, NAN), lse(B * NH * T, NAN);
  std::vector<float> att(B * NH * T * T, NAN);
  attention_forward(out.data(), att.data(), qkv_bf16.data(), B, T, C, NH, lse.data());
  attention_backward(dqkv.data(), nullptr, dout.data(), qkv_bf16.data(), nullptr, B, T, C, NH, lse.data());
  EXPECT_TRUE(all_close(out, ref.out, 2e-3, 1e-3, "out"));
  EXPECT_TRUE(all_close(dqkv, ref.dqkv, 2e-3, 1e-3, "dqkv"));
  // The log-sum-exp of fp32 scores (products of bf16 q and k summed in fp32) against double:
  // rtol 1e-5 + atol 1e-5 (values of order 1-5; fast_exp and fp32 sums, ~1e-6).
  EXPECT_TRUE(all_close(lse, ref.lse, 1e-5, 1e-5, "lse"));
  // The probabilities when asked for, exp(S - lse) in fp32 (not rounded), 0 above the
  // diagonal: rtol 1e-4 + atol 1e-6, as the fp32 path (scores summed in fp32, fast_exp).
  EXPECT_TRUE(all_close(att, ref.att, 1e-4, 1e-6, "att"));
  // Without the forward's log-sum-exp, backward finds it with the same pass over the same
  // scores: bit for bit the same gradients.
  std::vector<float> dqkv_alone(B * T * 3 * C, NAN);
  attention_backward(dqkv_alone.data(), nullptr, dout.data(), qkv_bf16.data(), nullptr, B, T, C, NH);
  EXPECT_EQ(dqkv_alone, dqkv) << B << "x" << T;
}

// The bf16 path under attention dropout (p 0.2) against the twin with its roundings and the
// kernel's masks: the dropped exp-scores zeroed, 1 / (1 - p) in each row's 1 / sum and in dV's
// product. Same tolerances as without dropout. One block, two, ragged ones, groups of heads.
TEST(AttentionBf16, DropoutMatchesTheTwinWithItsRoundings) {
  for (const auto& [B, T, C, NH] : {std::array<int64_t, 4>{2, 5, 12, 3}, {2, 128, 32, 2}, {1, 200, 24, 3},
                                    {1, 1024, 16, 4}}) {
    const AttentionDropout drop{.p = 0.2f, .key = 78, .first_row = 2, .heads = 2 * NH, .first_head = NH,
                                .positions = T, .query0 = 0, .key0 = 0};
    auto rounded = [](std::vector<float> x) {
      for (float& e : x) e = to_f32(to_bf16(e));
      return x;
    };
    const auto qkv = rounded(random_vector(B * T * 3 * C, 900 + T, -2.0f, 2.0f));
    const auto dout = rounded(random_vector(B * T * C, 950 + T));
    const Ref ref = reference(qkv, dout, B, T, C, NH, /*bf16_products=*/true, drop);
    std::vector<bfloat16> qkv_bf16(qkv.size());
    convert_to_bf16(qkv.data(), qkv_bf16.data(), static_cast<int64_t>(qkv.size()));
    std::vector<float> out(B * T * C, NAN), dqkv(B * T * 3 * C, NAN), lse(B * NH * T, NAN);
    attention_forward(out.data(), nullptr, qkv_bf16.data(), B, T, C, NH, lse.data(), drop);
    attention_backward(dqkv.data(), nullptr, dout.data(), qkv_bf16.data(), nullptr, B, T, C, NH, lse.data(), drop);
    EXPECT_TRUE(all_close(out, ref.out, 2e-3, 1e-3, "out")) << B << "x" << T;
    EXPECT_TRUE(all_close(dqkv, ref.dqkv, 2e-3, 1e-3, "dqkv")) << B << "x" << T;
  }
}

TEST(AttentionBf16, MatchesTheTwinWithItsRoundings) {
  check_bf16_against_reference(3, 1, 8, 2);      // a single token
  check_bf16_against_reference(2, 5, 12, 3);     // one block
  check_bf16_against_reference(2, 128, 32, 2);   // two blocks of 64 rows
  check_bf16_against_reference(1, 200, 24, 3);   // ragged blocks, rows ending inside a 16-lane chunk
  check_bf16_against_reference(2, 1100, 16, 4);  // groups of heads
  check_bf16_against_reference(1, 1024, 16, 4);  // groups of 2 heads: 2 threads split them
}

// With several threads the bf16 path splits each group's sequences or heads over the threads,
// each running its share's products alone (attention_bf16.cpp). The shares write disjoint
// heads; only the batching of a product changes (a share's heads instead of the group's), which
// oneDNN may block differently: fp32 summation order, rtol 1e-5 + atol 1e-6 (measured: at most
// 2.4e-7). A share's work done twice or not at all (oneDNN running one thread's part of a product
// made for two) is off by O(0.1-1). Groups of 2 sequences, of 2 heads (both split) and of 1
// head (not split), a ragged tail, and a group of 3 sequences split by heads (each thread some
// heads of every sequence: its rows of att and lse are not one slice). The probabilities and
// log-sum-exp written under the split are checked too.
TEST(AttentionBf16, TwoThreadsMatchOneThread) {
  const int before = omp_get_max_threads();
  for (const auto& [B, T, C, NH] : {std::array<int64_t, 4>{2, 128, 32, 2}, {3, 1024, 16, 4}, {1, 1100, 16, 4},
                                    {3, 200, 24, 3}, {3, 128, 32, 4}}) {
    const auto qkv32 = random_vector(B * T * 3 * C, 700 + T, -2.0f, 2.0f);
    const auto dout = random_vector(B * T * C, 800 + T);
    std::vector<bfloat16> qkv(qkv32.size());
    convert_to_bf16(qkv32.data(), qkv.data(), static_cast<int64_t>(qkv.size()));
    std::vector<float> out[2], dqkv[2], att[2], lse[2];
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      std::vector<float>& o = out[threads - 1];
      std::vector<float>& d = dqkv[threads - 1];
      o.assign(B * T * C, NAN);
      d.assign(B * T * 3 * C, NAN);
      att[threads - 1].assign(B * NH * T * T, NAN);
      lse[threads - 1].assign(B * NH * T, NAN);
      attention_forward(o.data(), att[threads - 1].data(), qkv.data(), B, T, C, NH, lse[threads - 1].data());
      attention_backward(d.data(), nullptr, dout.data(), qkv.data(), nullptr, B, T, C, NH, lse[threads - 1].data());
      EXPECT_EQ(omp_get_max_threads(), threads) << "the split must leave the caller's thread count";
    }
    omp_set_num_threads(before);
    EXPECT_TRUE(all_close(out[1], out[0], 1e-5, 1e-6, "out")) << B << "x" << T;
    EXPECT_TRUE(all_close(dqkv[1], dqkv[0], 1e-5, 1e-6, "dqkv")) << B << "x" << T;
    EXPECT_TRUE(all_close(att[1], att[0], 1e-5, 1e-6, "att")) << B << "x" << T;
    EXPECT_TRUE(all_close(lse[1], lse[0], 1e-5, 1e-6, "lse")) << B << "x" << T;
  }
}

// Without att (the bf16 training path and inference keep no probabilities), forward writes
// the same output and backward recomputes the probabilities group by group: both bit for bit
// what the path that keeps att computes, in fp32 and with bf16 products, across head groups.
void expect_recompute_bit_identical(int64_t B, int64_t T, int64_t C, int64_t NH) {
  const auto qkv = random_vector(B * T * 3 * C, 300 + T, -2.0f, 2.0f);
  const auto dout = random_vector(B * T * C, 400 + T);
  for (Precision p : {Precision::F32, Precision::BF16}) {
    PrecisionScope scope(p);
    std::vector<float> out(B * T * C), att(B * NH * T * T), datt(B * NH * T * T), dqkv(B * T * 3 * C);
    std::vector<float> out2(B * T * C, NAN), dqkv2(B * T * 3 * C, NAN);
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
    attention_forward(out2.data(), nullptr, qkv.data(), B, T, C, NH);
    attention_backward(dqkv2.data(), nullptr, dout.data(), qkv.data(), nullptr, B, T, C, NH);
    EXPECT_EQ(out, out2) << precision_name(p) << " T " << T;
    EXPECT_EQ(dqkv, dqkv2) << precision_name(p) << " T " << T;
  }
}

TEST(Attention, RecomputedProbabilitiesAreBitIdentical) {
  expect_recompute_bit_identical(2, 5, 12, 3);
  expect_recompute_bit_identical(1, 200, 24, 3);
  expect_recompute_bit_identical(3, 1024, 8, 2);  // groups of sequences
  expect_recompute_bit_identical(2, 1100, 16, 4);  // groups of heads
}

TEST(Attention, FiniteDifferenceGradients) {
  // loss = sum(out * g) in double; central differences on qkv with h = 1e-2.
  // Tolerance: atol 1e-3, rtol 1e-2.
  const int64_t B = 1, T = 4, C = 6, NH = 2;
  auto qkv = random_vector(B * T * 3 * C, 41);
  const auto g = random_vector(B * T * C, 42);
  std::vector<float> out(B * T * C), att(B * NH * T * T), datt(B * NH * T * T), dqkv(B * T * 3 * C);
  auto loss = [&] {
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    double l = 0.0;
    for (int64_t i = 0; i < B * T * C; ++i) l += static_cast<double>(out[i]) * g[i];
    return l;
  };
  const auto numeric = central_differences(qkv, 1e-2, loss);
  loss();
  attention_backward(dqkv.data(), datt.data(), g.data(), qkv.data(), att.data(), B, T, C, NH);
  EXPECT_TRUE(all_close(dqkv, numeric, 1e-2, 1e-3, "dqkv"));
}

TEST(Attention, BitIdenticalForFixedThreadCount) {
  const int64_t B = 2, T = 96, C = 64, NH = 4;
  const auto qkv = random_vector(B * T * 3 * C, 51);
  const auto dout = random_vector(B * T * C, 52);
  expect_deterministic_across_threads(
      [&] {
        std::vector<float> out(B * T * C), att(B * NH * T * T), datt(B * NH * T * T), dqkv(B * T * 3 * C);
        attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
        attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
        out.insert(out.end(), att.begin(), att.end());
        out.insert(out.end(), dqkv.begin(), dqkv.end());
        return out;
      },
      1e-5, 1e-6);
}

}  // namespace
}  // namespace loom::kernels
