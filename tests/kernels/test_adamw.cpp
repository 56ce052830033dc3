// AdamW against the torch.optim.AdamW update written out in double, a hand-computed first
// step, and equality of the serial and parallel paths (element-wise, so bit-identical).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "loom/kernels/adamw.hpp"
#include "loom/kernels/threads.hpp"
#include "test_util.hpp"

namespace loom::kernels {
namespace {

using loom::testing::all_close;
using loom::testing::random_vector;

// torch.optim.AdamW, one step, in double.
void reference_step(std::vector<double>& p, const std::vector<float>& g, std::vector<double>& m,
                    std::vector<double>& v, const AdamWParams& a) {
  const double bc1 = 1.0 - std::pow(a.beta1, static_cast<double>(a.step));
  const double bc2 = 1.0 - std::pow(a.beta2, static_cast<double>(a.step));
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] -= static_cast<double>(a.lr) * a.weight_decay * p[i];
    m[i] = a.beta1 * m[i] + (1.0 - a.beta1) * g[i];
    v[i] = a.beta2 * v[i] + (1.0 - a.beta2) * g[i] * g[i];
    p[i] -= a.lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + a.eps);
  }
}

TEST(AdamW, FiveStepsMatchTorchFormulas) {
  // Tolerance: rtol 1e-5, atol 1e-7 on params and moments after 5 steps (fp32 vs double).
  const int64_t n = 1037;  // not a multiple of the vector width
  auto param = random_vector(n, 1);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  std::vector<double> rp(param.begin(), param.end()), rm(n, 0.0), rv(n, 0.0);
  AdamWParams a;
  a.lr = 1e-2f;
  a.weight_decay = 0.1f;
  for (int64_t step = 1; step <= 5; ++step) {
    const auto g = random_vector(n, 10 + step, -2.0f, 2.0f);
    a.step = step;
    adamw_update(param.data(), g.data(), m.data(), v.data(), n, a);
    reference_step(rp, g, rm, rv, a);
  }
  EXPECT_TRUE(all_close(param, std::vector<float>(rp.begin(), rp.end()), 1e-5, 1e-7, "param"));
  EXPECT_TRUE(all_close(m, std::vector<float>(rm.begin(), rm.end()), 1e-5, 1e-7, "m"));
  EXPECT_TRUE(all_close(v, std::vector<float>(rv.begin(), rv.end()), 1e-5, 1e-9, "v"));
}

TEST(AdamW, FirstStepIsSignedLearningRate) {
  // Step 1 from zero moments: mhat = g, vhat = g^2, so p1 = p0 (1 - lr wd) - lr g / (|g| + eps).
  AdamWParams a;
  a.lr = 0.5f;
  a.weight_decay = 0.2f;
  a.eps = 1e-8f;
  std::vector<float> p{1.0f, -2.0f, 0.0f}, g{0.3f, -4.0f, 0.0f}, m(3, 0.0f), v(3, 0.0f);
  adamw_update(p.data(), g.data(), m.data(), v.data(), 3, a);
  EXPECT_NEAR(p[0], 1.0 * 0.9 - 0.5, 1e-6);
  EXPECT_NEAR(p[1], -2.0 * 0.9 + 0.5, 1e-6);
  EXPECT_EQ(p[2], 0.0f);  // zero gradient: no step, no NaN from 0 / (0 + eps)
}

TEST(AdamW, ParallelPathEqualsSerial) {
  const int64_t n = 200'003;
  const auto p0 = random_vector(n, 2), g = random_vector(n, 3);
  const auto m0 = random_vector(n, 4, -0.1f, 0.1f), v0 = random_vector(n, 5, 0.0f, 0.01f);
  AdamWParams a;
  a.step = 7;
  a.weight_decay = 0.05f;
  auto run = [&](int threads) {
    set_num_threads(threads);
    auto p = p0, m = m0, v = v0;
    adamw_update(p.data(), g.data(), m.data(), v.data(), n, a);
    set_num_threads(1);
    p.insert(p.end(), m.begin(), m.end());
    p.insert(p.end(), v.begin(), v.end());
    return p;
  };
  EXPECT_TRUE(all_close(run(2), run(1), 0.0, 0.0, "2 threads vs 1"));
}

}  // namespace
}  // namespace loom::kernels
