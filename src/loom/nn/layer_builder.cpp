#include "loom/nn/layer_builder.hpp"

namespace loom::nn {

std::unique_ptr<Linear> LayerBuilder::column_parallel_linear(int64_t in, int64_t out, int64_t) const {
  return std::make_unique<Linear>(in, out);
}

std::unique_ptr<Linear> LayerBuilder::row_parallel_linear(int64_t in, int64_t out) const {
  return std::make_unique<Linear>(in, out);
}

std::unique_ptr<Embedding> LayerBuilder::embedding(int64_t V, int64_t Vp, int64_t block_size, int64_t C) const {
  return std::make_unique<Embedding>(V, Vp, block_size, C);
}

std::unique_ptr<MoE> LayerBuilder::mixture_of_experts(int64_t C, const MoeConfig& config) const {
  return std::make_unique<MoE>(C, config);
}

const LayerBuilder& serial_layers() {
  static const LayerBuilder serial;
  return serial;
}

}  // namespace loom::nn
