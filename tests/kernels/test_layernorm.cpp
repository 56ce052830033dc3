// LayerNorm kernels against a double-precision twin, finite differences, accumulation of
// dweight/dbias and bit-identical results for a fixed thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "loom/kernels/layernorm.hpp"
#include "test_util.hpp"

namespace loom::kernels {
namespace {

using loom::testing::all_close;
using loom::testing::central_differences;
using loom::testing::expect_deterministic_across_threads;
using loom::testing::random_vector;

struct LayerNormRef {
  std::vector<float> out, mean, rstd, dinp, dweight, dbias;
};

// Plain loops in double, straight from the definition.
LayerNormRef reference(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
              const std::vector<float>& dout, int64_t N, int64_t C) {
  LayerNormRef r{std::vector<float>(N * C), std::vector<float>(N), std::vector<float>(N), std::vector<float>(N * C),
        std::vector<float>(C), std::vector<float>(C)};
  std::vector<double> dw(C, 0.0), db(C, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    double m = 0.0, v = 0.0;
    for (int64_t c = 0; c < C; ++c) m += x[n * C + c];
    m /= C;
    for (int64_t c = 0; c < C; ++c) v += (x[n * C + c] - m) * (x[n * C + c] - m);
    v /= C;
    const double s = 1.0 / std::sqrt(v + kLayerNormEps);
    r.mean[n] = static_cast<float>(m);
    r.rstd[n] = static_cast<float>(s);
    double sum_g = 0.0, sum_gx = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      const double xh = (x[n * C + c] - m) * s;
      r.out[n * C + c] = static_cast<float>(xh * w[c] + b[c]);
      const double g = static_cast<double>(dout[n * C + c]) * w[c];
      sum_g += g;
      sum_gx += g * xh;
      dw[c] += static_cast<double>(dout[n * C + c]) * xh;
      db[c] += dout[n * C + c];
    }
    for (int64_t c = 0; c < C; ++c) {
      const double xh = (x[n * C + c] - m) * s;
      const double g = static_cast<double>(dout[n * C + c]) * w[c];
      r.dinp[n * C + c] = static_cast<float>(s * (g - sum_g / C - xh * sum_gx / C));
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    r.dweight[c] = static_cast<float>(dw[c]);
    r.dbias[c] = static_cast<float>(db[c]);
  }
  return r;
}

void check_against_reference(int64_t N, int64_t C, float offset) {
  // Tolerance: rtol 1e-4, atol 1e-5 (fp32 row sums of C terms against double). At mean 100
  // the output's error is set by the fp32 mean itself: half an ulp of 100 (3.8e-6) times
  // rstd (~0.87), plus the shifted sum's few ulps of values within +-4; measured 5.2e-6 on
  // AVX2 and AVX-512 alike, since the summation order no longer matters (an unshifted sum
  // gave 1.9e-5 on AVX2 and 2.2e-5 on AVX-512, whose 16 lanes order it differently).
  auto x = random_vector(N * C, 1, -2.0f + offset, 2.0f + offset);
  const auto w = random_vector(C, 2, 0.5f, 1.5f), b = random_vector(C, 3);
  const auto dout = random_vector(N * C, 4);
  const LayerNormRef ref = reference(x, w, b, dout, N, C);
  std::vector<float> out(N * C), mean(N), rstd(N), dinp(N * C), dw(C, 0.0f), db(C, 0.0f);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  EXPECT_TRUE(all_close(out, ref.out, 1e-4, 1e-5, "out"));
  EXPECT_TRUE(all_close(mean, ref.mean, 1e-5, 1e-6, "mean"));
  EXPECT_TRUE(all_close(rstd, ref.rstd, 1e-4, 1e-6, "rstd"));
  layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  EXPECT_TRUE(all_close(dinp, ref.dinp, 1e-4, 1e-5, "dinp"));
  EXPECT_TRUE(all_close(dw, ref.dweight, 1e-4, 1e-5, "dweight"));
  EXPECT_TRUE(all_close(db, ref.dbias, 1e-4, 1e-5, "dbias"));
}

TEST(LayerNorm, MatchesTwinAtOddSize) { check_against_reference(7, 13, 0.0f); }
TEST(LayerNorm, MatchesTwinAtParallelSize) { check_against_reference(300, 97, 0.0f); }
// A large common offset is where E[x^2] - mean^2 would cancel.
TEST(LayerNorm, MatchesTwinWithLargeMean) { check_against_reference(9, 31, 100.0f); }

TEST(LayerNorm, FiniteDifferenceGradients) {
  // loss = sum(out * g) in double; central differences with h = 1e-2 on fp32 forward.
  // Tolerance: atol 2e-3, rtol 1e-2 (fp32 rounding / 2h dominates).
  const int64_t N = 3, C = 6;
  auto x = random_vector(N * C, 11), w = random_vector(C, 12, 0.5f, 1.5f), b = random_vector(C, 13);
  const auto g = random_vector(N * C, 14);
  std::vector<float> out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    double l = 0.0;
    for (int64_t i = 0; i < N * C; ++i) l += static_cast<double>(out[i]) * g[i];
    return l;
  };
  const auto nx = central_differences(x, 1e-2, loss), nw = central_differences(w, 1e-2, loss),
             nb = central_differences(b, 1e-2, loss);
  loss();
  std::vector<float> dinp(N * C), dw(C, 0.0f), db(C, 0.0f);
  layernorm_backward(dinp.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  EXPECT_TRUE(all_close(dinp, nx, 1e-2, 2e-3, "dinp"));
  EXPECT_TRUE(all_close(dw, nw, 1e-2, 2e-3, "dweight"));
  EXPECT_TRUE(all_close(db, nb, 1e-2, 2e-3, "dbias"));
}

TEST(LayerNorm, BackwardAccumulatesParamGradsAndOverwritesInputGrad) {
  const int64_t N = 5, C = 11;
  const auto x = random_vector(N * C, 21), w = random_vector(C, 22), b = random_vector(C, 23);
  const auto dout = random_vector(N * C, 24);
  std::vector<float> out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  std::vector<float> dinp1(N * C, 0.0f), dw1(C, 0.0f), db1(C, 0.0f);
  layernorm_backward(dinp1.data(), dw1.data(), db1.data(), dout.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  std::vector<float> dinp2(N * C, 123.0f), dw2(C, 0.0f), db2(C, 0.0f);
  for (int rep = 0; rep < 2; ++rep)
    layernorm_backward(dinp2.data(), dw2.data(), db2.data(), dout.data(), x.data(), w.data(),
                       mean.data(), rstd.data(), N, C);
  std::vector<float> twice_w(C), twice_b(C);
  for (int64_t c = 0; c < C; ++c) {
    twice_w[c] = 2.0f * dw1[c];
    twice_b[c] = 2.0f * db1[c];
  }
  EXPECT_TRUE(all_close(dw2, twice_w, 1e-6, 1e-7, "dweight twice"));
  EXPECT_TRUE(all_close(db2, twice_b, 1e-6, 1e-7, "dbias twice"));
  EXPECT_TRUE(all_close(dinp2, dinp1, 0.0, 0.0, "dinp overwritten"));
}

TEST(LayerNorm, BitIdenticalForFixedThreadCount) {
  // Big enough to take the parallel path; two 2-thread runs must agree bit for bit, and
  // agree with the 1-thread run to rounding.
  const int64_t N = 512, C = 96;
  const auto x = random_vector(N * C, 31), w = random_vector(C, 32), b = random_vector(C, 33);
  const auto dout = random_vector(N * C, 34);
  expect_deterministic_across_threads(
      [&] {
        std::vector<float> out(N * C), mean(N), rstd(N), dinp(N * C), dw(C, 0.0f), db(C, 0.0f);
        layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
        layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                           rstd.data(), N, C);
        out.insert(out.end(), dinp.begin(), dinp.end());
        out.insert(out.end(), dw.begin(), dw.end());
        out.insert(out.end(), db.begin(), db.end());
        return out;
      },
      // dweight/dbias sum 512 rows in a thread-dependent order: terms up to ~2, so fp32
      // rounding allows ~512 x 2 x 6e-8 = 6e-5 between the orders (seen: 1.8e-5 on AVX-512).
      1e-5, 1e-4);
}

// Mixed precision keeps LayerNorm's input in bf16: the forward that writes that copy gives
// the same output and statistics bit for bit and to_bf16 of every input; the backward from
// the copy is the fp32 backward on the widened copy (the same fp32 arithmetic; 1e-6 allows
// for a different vectorisation of the bf16 loads).
TEST(LayerNorm, KeepsItsInputInBf16) {
  const int64_t N = 300, C = 97;
  const auto x = random_vector(N * C, 31, -3.0f, 3.0f), w = random_vector(C, 32, 0.5f, 1.5f), b = random_vector(C, 33);
  const auto dout = random_vector(N * C, 34);
  std::vector<float> out(N * C), out2(N * C), mean(N), rstd(N), mean2(N), rstd2(N), widened(N * C);
  std::vector<bfloat16> kept(N * C);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  layernorm_forward(out2.data(), mean2.data(), rstd2.data(), x.data(), w.data(), b.data(), N, C, kept.data());
  EXPECT_EQ(out, out2);
  EXPECT_EQ(mean, mean2);
  EXPECT_EQ(rstd, rstd2);
  for (int64_t i = 0; i < N * C; ++i) {
    ASSERT_EQ(kept[i].bits, to_bf16(x[i]).bits) << i;
    widened[i] = to_f32(kept[i]);
  }
  std::vector<float> dx(N * C), dw(C, 0.0f), db(C, 0.0f), dx2(N * C), dw2(C, 0.0f), db2(C, 0.0f);
  layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), kept.data(), w.data(), mean.data(), rstd.data(), N, C);
  layernorm_backward(dx2.data(), dw2.data(), db2.data(), dout.data(), widened.data(), w.data(), mean.data(), rstd.data(),
                     N, C);
  EXPECT_TRUE(all_close(dx, dx2, 1e-6, 1e-7, "dx"));
  EXPECT_TRUE(all_close(dw, dw2, 1e-6, 1e-7, "dweight"));
  EXPECT_TRUE(all_close(db, db2, 1e-6, 1e-7, "dbias"));
}

}  // namespace
}  // namespace loom::kernels
