#include "loom/nn/init.hpp"

namespace loom::nn {

void init_normal(Tensor& t, float stddev, Rng& rng) {
  std::normal_distribution<float> dist(0.0f, stddev);
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
}

}  // namespace loom::nn
