// AdamW against the torch.optim.AdamW update written out in double, a hand-computed first
// step, equality of the serial and parallel paths (element-wise, so bit-identical), and the
// bf16 copy written in the update's pass.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "loom/kernels/adamw.hpp"
#include "loom/kernels/precision.hpp"
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

// Parameters, gradients and moments of n elements (the moments in their usual ranges).
struct UpdateInputs {
  std::vector<float> p, g, m, v;
};
UpdateInputs random_inputs(int64_t n, uint64_t seed) {
  return {random_vector(n, seed), random_vector(n, seed + 1), random_vector(n, seed + 2, -0.1f, 0.1f),
          random_vector(n, seed + 3, 0.0f, 0.01f)};
}

// One update of a copy of `in` on `threads` threads (writing the bf16 copy when given): the
// updated p, m and v one after the other.
std::vector<float> updated(const UpdateInputs& in, const AdamWParams& a, int threads, bfloat16* copy = nullptr) {
  set_num_threads(threads);
  auto p = in.p, m = in.m, v = in.v;
  adamw_update(p.data(), in.g.data(), m.data(), v.data(), static_cast<int64_t>(p.size()), a, copy);
  set_num_threads(1);
  p.insert(p.end(), m.begin(), m.end());
  p.insert(p.end(), v.begin(), v.end());
  return p;
}

TEST(AdamW, ParallelPathEqualsSerial) {
  const UpdateInputs in = random_inputs(200'003, 2);
  AdamWParams a;
  a.step = 7;
  a.weight_decay = 0.05f;
  EXPECT_TRUE(all_close(updated(in, a, 2), updated(in, a, 1), 0.0, 0.0, "2 threads vs 1"));
}

TEST(AdamW, WritesTheBf16CopyOfTheUpdatedValues) {
  // With a bf16 destination the update is the same (param, m, v bit for bit) and the copy is
  // convert_to_bf16 of the updated param, at 1 and 2 threads; n covers several 4096-value runs
  // per thread and a short last run.
  const int64_t n = 20'011;
  const UpdateInputs in = random_inputs(n, 12);
  AdamWParams a;
  a.step = 3;
  a.weight_decay = 0.1f;
  const std::vector<float> plain = updated(in, a, 1);
  std::vector<bfloat16> want(n);
  convert_to_bf16(plain.data(), want.data(), n);  // the updated param comes first
  for (int threads : {1, 2}) {
    std::vector<bfloat16> copy(n, bfloat16{0x7f7f});
    EXPECT_TRUE(all_close(updated(in, a, threads, copy.data()), plain, 0.0, 0.0, "param, m and v"));
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(copy[i].bits, want[i].bits) << threads << " threads, element " << i;
  }
}

}  // namespace
}  // namespace loom::kernels
