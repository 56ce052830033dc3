// Central finite differences against a module's analytic backward, on a scalar loss
// sum(out * probe) computed in double. Checks every input element and a sample of every
// parameter's elements.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "loom/nn/module.hpp"
#include "test_util.hpp"

namespace loom::testing {

struct GradCheckOptions {
  double h = 1e-2;        // fp32 values: large enough that rounding does not dominate
  double rtol = 2e-2;     // relative to the largest analytic gradient of the tensor
  double atol = 1e-3;
  int samples_per_param = 12;
};

inline double probe_loss(nn::Module& m, const Tensor& x, const std::vector<float>& probe) {
  nn::Context ctx;
  Tensor y = m.forward(x, ctx);
  double s = 0.0;
  for (int64_t i = 0; i < y.numel(); ++i) s += static_cast<double>(y.f32()[i]) * probe[static_cast<size_t>(i)];
  return s;
}

// x is an f32 input (its gradient is checked) or an i32 input (not differentiable).
inline void expect_gradients_match(nn::Module& m, Tensor x, const GradCheckOptions& o = {}) {
  nn::Context ctx;
  Tensor y = m.forward(x, ctx);
  const std::vector<float> probe = random_vector(y.numel(), 99);
  Tensor dy = Tensor::empty(y.shape());
  std::copy(probe.begin(), probe.end(), dy.f32());
  m.zero_grad();
  Tensor dx = m.backward(dy, ctx);

  auto compare = [&](const std::string& what, const float* analytic, float* values, int64_t n, int64_t stride) {
    double scale = 0.0;
    for (int64_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(static_cast<double>(analytic[i])));
    for (int64_t i = 0; i < n; i += stride) {
      const double num = central_difference(values[i], o.h, [&] { return probe_loss(m, x, probe); });
      EXPECT_NEAR(analytic[i], num, o.atol + o.rtol * scale) << what << "[" << i << "]";
    }
  };
  if (x.dtype() == DType::F32) {
    ASSERT_TRUE(dx.defined());
    compare("d input", dx.f32(), x.f32(), x.numel(), std::max<int64_t>(1, x.numel() / 40));
  }
  for (nn::Parameter* p : m.parameters())
    compare(p->name(), p->grad().f32(), p->value().f32(), p->numel(),
            std::max<int64_t>(1, p->numel() / o.samples_per_param));
}

inline void randomize_parameters(nn::Module& m, uint64_t seed, float scale = 0.5f) {
  for (nn::Parameter* p : m.parameters()) {
    const std::vector<float> v = random_vector(p->numel(), seed++, -scale, scale);
    std::copy(v.begin(), v.end(), p->value().f32());
  }
}

inline Tensor random_tensor(const Shape& shape, uint64_t seed, float scale = 1.0f) {
  Tensor t = Tensor::empty(shape);
  const std::vector<float> v = random_vector(t.numel(), seed, -scale, scale);
  std::copy(v.begin(), v.end(), t.f32());
  return t;
}

}  // namespace loom::testing
