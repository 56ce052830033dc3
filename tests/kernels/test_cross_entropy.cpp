// Cross-entropy against a double twin, padding columns (ignored forward, zeroed backward),
// huge logits, finite differences, bad targets and thread determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "loom/error.hpp"
#include "loom/kernels/cross_entropy.hpp"
#include "test_util.hpp"

namespace loom::kernels {
namespace {

using loom::testing::all_close;
using loom::testing::central_difference;
using loom::testing::expect_deterministic_across_threads;
using loom::testing::random_vector;

// losses and dlogits (N, Vp) from the definition, in double.
void reference(const std::vector<float>& logits, const std::vector<int32_t>& targets, float dloss,
               int64_t N, int64_t V, int64_t Vp, std::vector<float>& losses, std::vector<float>& dlogits) {
  losses.assign(N, 0.0f);
  dlogits.assign(N * Vp, 0.0f);
  for (int64_t n = 0; n < N; ++n) {
    double mx = -INFINITY, sum = 0.0;
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, static_cast<double>(logits[n * Vp + j]));
    for (int64_t j = 0; j < V; ++j) sum += std::exp(logits[n * Vp + j] - mx);
    losses[n] = static_cast<float>(mx + std::log(sum) - logits[n * Vp + targets[n]]);
    for (int64_t j = 0; j < V; ++j) {
      const double p = std::exp(logits[n * Vp + j] - mx) / sum;
      dlogits[n * Vp + j] = static_cast<float>((p - (j == targets[n] ? 1.0 : 0.0)) * dloss);
    }
  }
}

std::vector<int32_t> targets_for(int64_t N, int64_t V) {
  std::vector<int32_t> t(N);
  for (int64_t n = 0; n < N; ++n) t[n] = static_cast<int32_t>((n * 7 + 3) % V);
  return t;
}

void check(int64_t N, int64_t V, int64_t Vp, float scale) {
  // Tolerance: rtol 1e-5, atol 1e-6 for losses and dlogits (1e-4 / 1e-5 when scale is 1e4,
  // where the fp32 logits themselves carry 1e-3 absolute rounding).
  auto logits = random_vector(N * Vp, 1 + Vp, -scale, scale);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = V; j < Vp; ++j) logits[n * Vp + j] = NAN;  // padding must never be read
  const auto targets = targets_for(N, V);
  const float dloss = 1.0f / static_cast<float>(N);
  std::vector<float> want_loss, want_d;
  reference(logits, targets, dloss, N, V, Vp, want_loss, want_d);
  const double rtol = scale > 100 ? 1e-4 : 1e-5, atol = scale > 100 ? 1e-5 : 1e-6;
  std::vector<float> losses(N);
  cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V, Vp);
  for (float l : losses) ASSERT_TRUE(std::isfinite(l));
  EXPECT_TRUE(all_close(losses, want_loss, rtol, atol, "losses"));
  cross_entropy_backward(logits.data(), targets.data(), dloss, N, V, Vp);
  EXPECT_TRUE(all_close(logits, want_d, rtol, atol, "dlogits (padding must be 0)"));
}

TEST(CrossEntropy, MatchesTwinOddSizes) { check(7, 13, 13, 3.0f); }
TEST(CrossEntropy, PaddingColumnsIgnoredAndZeroed) { check(7, 13, 16, 3.0f); }
TEST(CrossEntropy, LargeVocabularyParallelPath) { check(33, 1000, 1024, 5.0f); }
TEST(CrossEntropy, HugeLogitsStayFinite) { check(5, 65, 128, 1e4f); }

TEST(CrossEntropy, FiniteDifferenceGradient) {
  // loss = dloss * sum_n losses_n, which is what the backward differentiates; h = 1e-2.
  // Tolerance: atol 1e-4, rtol 1e-2.
  const int64_t N = 3, V = 5, Vp = 8;
  auto logits = random_vector(N * Vp, 2, -2.0f, 2.0f);
  const auto targets = targets_for(N, V);
  const float dloss = 0.7f;
  std::vector<float> losses(N), numeric(N * Vp, 0.0f);
  auto loss = [&] {
    cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V, Vp);
    double l = 0.0;
    for (float x : losses) l += static_cast<double>(dloss) * x;
    return l;
  };
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < V; ++j)
      numeric[n * Vp + j] = static_cast<float>(central_difference(logits[n * Vp + j], 1e-2, loss));
  cross_entropy_backward(logits.data(), targets.data(), dloss, N, V, Vp);
  EXPECT_TRUE(all_close(logits, numeric, 1e-2, 1e-4, "dlogits"));
}

TEST(CrossEntropy, OutOfRangeTargetThrows) {
  const int64_t N = 2, V = 4, Vp = 4;
  auto logits = random_vector(N * Vp, 3);
  std::vector<float> losses(N);
  const std::vector<int32_t> targets{1, 4};
  try {
    cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V, Vp);
    ADD_FAILURE() << "target 4 with V = 4 did not throw";
  } catch (const loom::Error& e) {
    EXPECT_NE(std::string(e.what()).find("target 4"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cross_entropy_backward(logits.data(), targets.data(), 1.0f, N, V, Vp), loom::Error);
}

TEST(CrossEntropy, BitIdenticalForFixedThreadCount) {
  const int64_t N = 64, V = 1000, Vp = 1024;
  const auto logits = random_vector(N * Vp, 4, -4.0f, 4.0f);
  const auto targets = targets_for(N, V);
  expect_deterministic_across_threads(
      [&] {
        std::vector<float> losses(N), d = logits;
        cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V, Vp);
        cross_entropy_backward(d.data(), targets.data(), 1.0f / N, N, V, Vp);
        losses.insert(losses.end(), d.begin(), d.end());
        return losses;
      },
      0.0, 0.0, "2 threads vs 1 (rows are independent)");
}

}  // namespace
}  // namespace loom::kernels
