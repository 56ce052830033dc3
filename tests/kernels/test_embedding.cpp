// Embedding kernels against plain loops, finite differences, accumulation, the out-of-range
// error, and thread-count independence (the backward is split over channels, so 1 and 2
// threads must agree bit for bit).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "loom/error.hpp"
#include "loom/kernels/embedding.hpp"
#include "test_util.hpp"

namespace loom::kernels {
namespace {

using loom::testing::all_close;
using loom::testing::central_differences;
using loom::testing::expect_deterministic_across_threads;
using loom::testing::random_vector;

std::vector<int32_t> random_ids(int64_t n, int64_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(V - 1));
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = dist(rng);
  return ids;
}

TEST(Embedding, ForwardAndBackwardMatchTwin) {
  // Tolerance: forward exact (one fp32 add); backward rtol 1e-5 against double sums.
  const int64_t B = 3, T = 5, C = 13, V = 7, maxT = 8;  // V < B*T: ids repeat
  const auto ids = random_ids(B * T, V, 1);
  const auto wte = random_vector(V * C, 2), wpe = random_vector(maxT * C, 3);
  const auto dout = random_vector(B * T * C, 4);
  std::vector<float> out(B * T * C), want(B * T * C);
  std::vector<double> dte(V * C, 0.0), dpe(maxT * C, 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        const int64_t n = b * T + t;
        want[n * C + c] = wte[ids[n] * C + c] + wpe[t * C + c];
        dte[ids[n] * C + c] += dout[n * C + c];
        dpe[t * C + c] += dout[n * C + c];
      }
  embedding_forward(out.data(), ids.data(), wte.data(), wpe.data(), B, T, C, V);
  EXPECT_TRUE(all_close(out, want, 0.0, 0.0, "out"));
  std::vector<float> dwte(V * C, 0.0f), dwpe(maxT * C, 0.0f);
  embedding_backward(dwte.data(), dwpe.data(), dout.data(), ids.data(), B, T, C);
  EXPECT_TRUE(all_close(dwte, std::vector<float>(dte.begin(), dte.end()), 1e-5, 1e-6, "dwte"));
  EXPECT_TRUE(all_close(dwpe, std::vector<float>(dpe.begin(), dpe.end()), 1e-5, 1e-6, "dwpe"));
  // Positions t >= T are not touched.
  for (int64_t i = T * C; i < maxT * C; ++i) ASSERT_EQ(dwpe[i], 0.0f) << i;
}

TEST(Embedding, FiniteDifferenceGradients) {
  // loss = sum(out * g); the op is linear, so central differences (h = 0.1) are exact up to
  // fp32 rounding. Tolerance: atol 1e-3.
  const int64_t B = 2, T = 3, C = 4, V = 5;
  const std::vector<int32_t> ids{1, 3, 1, 4, 1, 0};
  auto wte = random_vector(V * C, 5), wpe = random_vector(T * C, 6);
  const auto g = random_vector(B * T * C, 7);
  std::vector<float> out(B * T * C);
  auto loss = [&] {
    embedding_forward(out.data(), ids.data(), wte.data(), wpe.data(), B, T, C, V);
    double l = 0.0;
    for (int64_t i = 0; i < B * T * C; ++i) l += static_cast<double>(out[i]) * g[i];
    return l;
  };
  const auto nte = central_differences(wte, 0.1, loss), npe = central_differences(wpe, 0.1, loss);
  std::vector<float> dwte(V * C, 0.0f), dwpe(T * C, 0.0f);
  embedding_backward(dwte.data(), dwpe.data(), g.data(), ids.data(), B, T, C);
  EXPECT_TRUE(all_close(dwte, nte, 1e-4, 1e-3, "dwte"));
  EXPECT_TRUE(all_close(dwpe, npe, 1e-4, 1e-3, "dwpe"));
}

TEST(Embedding, BackwardAccumulates) {
  const int64_t B = 2, T = 4, C = 9, V = 3;
  const auto ids = random_ids(B * T, V, 8);
  const auto dout = random_vector(B * T * C, 9);
  std::vector<float> once_te(V * C, 0.0f), once_pe(T * C, 0.0f);
  embedding_backward(once_te.data(), once_pe.data(), dout.data(), ids.data(), B, T, C);
  std::vector<float> twice_te(V * C, 0.0f), twice_pe(T * C, 0.0f);
  for (int rep = 0; rep < 2; ++rep)
    embedding_backward(twice_te.data(), twice_pe.data(), dout.data(), ids.data(), B, T, C);
  for (auto& x : once_te) x *= 2.0f;
  for (auto& x : once_pe) x *= 2.0f;
  EXPECT_TRUE(all_close(twice_te, once_te, 1e-6, 1e-7, "dwte twice"));
  EXPECT_TRUE(all_close(twice_pe, once_pe, 1e-6, 1e-7, "dwpe twice"));
}

TEST(Embedding, OutOfRangeIdThrowsNamingIdAndVocab) {
  const int64_t B = 1, T = 3, C = 2, V = 5;
  const auto wte = random_vector(V * C, 10), wpe = random_vector(T * C, 11);
  std::vector<float> out(B * T * C);
  for (int32_t bad : {5, -1, 1000}) {
    const std::vector<int32_t> ids{0, bad, 1};
    try {
      embedding_forward(out.data(), ids.data(), wte.data(), wpe.data(), B, T, C, V);
      ADD_FAILURE() << "id " << bad << " did not throw";
    } catch (const loom::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("token id " + std::to_string(bad)), std::string::npos) << msg;
      EXPECT_NE(msg.find("[0, 5)"), std::string::npos) << msg;
    }
  }
}

TEST(Embedding, BackwardIndependentOfThreadCount) {
  const int64_t B = 4, T = 64, C = 200, V = 50;
  const auto ids = random_ids(B * T, V, 12);
  const auto dout = random_vector(B * T * C, 13);
  const auto wte = random_vector(V * C, 14), wpe = random_vector(T * C, 15);
  expect_deterministic_across_threads(
      [&] {
        std::vector<float> out(B * T * C), dwte(V * C, 0.5f), dwpe(T * C, 0.5f);
        embedding_forward(out.data(), ids.data(), wte.data(), wpe.data(), B, T, C, V);
        embedding_backward(dwte.data(), dwpe.data(), dout.data(), ids.data(), B, T, C);
        out.insert(out.end(), dwte.begin(), dwte.end());
        out.insert(out.end(), dwpe.begin(), dwpe.end());
        return out;
      },
      0.0, 0.0);
}

}  // namespace
}  // namespace loom::kernels
