#include "loom/nn/init.hpp"

namespace loom::nn {

void init_normal(Tensor& t, float stddev, Rng& rng) {
  std::normal_distribution<float> dist(0.0f, stddev);
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
}

void init_normal(Parameter& p, float stddev, Rng& rng) {
  const ShardSpec& spec = p.shard_spec();
  if (!spec.sharded()) return init_normal(p.value(), stddev, rng);
  Tensor full = Tensor::empty(spec.full_shape(p.shape()), DType::F32, MemoryCategory::Other);
  init_normal(full, stddev, rng);
  copy_shard(full, p.value(), spec);
}

}  // namespace loom::nn
