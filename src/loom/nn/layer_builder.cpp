#include "loom/nn/layer_builder.hpp"

#include "loom/nn/causal_attention.hpp"
#include "loom/nn/lm_head.hpp"

namespace loom::nn {

std::unique_ptr<Linear> LayerBuilder::column_parallel_linear(int64_t in, int64_t out, int64_t) const {
  return std::make_unique<Linear>(in, out);
}

std::unique_ptr<Linear> LayerBuilder::row_parallel_linear(int64_t in, int64_t out) const {
  return std::make_unique<Linear>(in, out);
}

std::unique_ptr<AttentionCore> LayerBuilder::attention(int64_t C, int64_t NH) const {
  return std::make_unique<CausalAttention>(C, NH);
}

std::unique_ptr<Embedding> LayerBuilder::embedding(int64_t V, int64_t Vp, int64_t block_size, int64_t C) const {
  return std::make_unique<Embedding>(V, Vp, block_size, C);
}

Tensor LayerBuilder::head_logits(const Tensor& x, Parameter& w) const { return nn::head_logits(x, w); }

Tensor LayerBuilder::head_backward(const Tensor& dlogits, const Tensor& kept, Parameter& w) const {
  Tensor dx = Tensor::empty(kept.shape());
  head_gradients(dlogits, kept, w, dx.f32());
  return dx;
}

std::unique_ptr<GraphConv> LayerBuilder::graph_conv(int64_t in, int64_t out, int64_t,
                                                   std::shared_ptr<const GraphOperator> graph, bool input_gradient) const {
  return std::make_unique<GraphConv>(in, out, std::move(graph), input_gradient);
}

std::unique_ptr<MoE> LayerBuilder::mixture_of_experts_over(int64_t C, const MoeConfig& config,
                                                          const SequenceParts& parts) const {
  return std::make_unique<MoE>(C, config, local_experts(), parts);
}

const LayerBuilder& serial_layers() {
  static const LayerBuilder serial;
  return serial;
}

}  // namespace loom::nn
