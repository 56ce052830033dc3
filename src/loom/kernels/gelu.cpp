// GELU, tanh approximation: gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
// Evaluated as x * sigmoid(2u), since 0.5 (1 + tanh(u)) == 1 / (1 + exp(-2u)): one fast_exp,
// vectorisable, and no cancellation in 1 + tanh(u) for negative x. Element-wise, so in-place
// (out == inp, dinp == dout) is safe; no __restrict for that reason.
#include "loom/kernels/gelu.hpp"

#include "loom/kernels/fast_math.hpp"

namespace loom::kernels {

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
constexpr int64_t kParallelMin = 1 << 15;
}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    out[i] = x / (1.0f + fast_exp(-2.0f * u));
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
    // With s = sigmoid(2u): d/dx [x s] = s + x * 2 s (1 - s) * du  (1 - tanh^2 = 4 s (1 - s)).
    const float s = 1.0f / (1.0f + fast_exp(-2.0f * u));
    dinp[i] = (s + 2.0f * x * s * (1.0f - s) * du) * dout[i];
  }
}

}  // namespace loom::kernels
