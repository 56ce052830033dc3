#include "loom/nn/gcn.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "loom/error.hpp"
#include "loom/kernels/dropout.hpp"

namespace loom::nn {

namespace {

// ReLU then inverted dropout, in place on a fresh output. Backward needs only where the
// gradient passes and its scale: the dropout mask with ReLU's gate folded in (0 where the
// output is not positive), so the output itself is not kept: the next layer keeps it (in bf16
// under mixed precision, which would otherwise sit beside this fp32 copy).
class ReluDropout : public Module {
 public:
  // conv: the layer before, whose output block (the whole, or a parallel rank's) this gets.
  ReluDropout(float p, uint64_t layer, std::shared_ptr<const DropoutMode> mode, const GraphConv& conv)
      : p_(p), layer_(layer), mode_(std::move(mode)), conv_(conv) {}

 protected:
  Tensor forward_impl(const Tensor& x, Context& ctx) override {
    Tensor out = x.clone();  // (N, H)
    kernels::relu_forward(out.f32(), out.numel());
    Tensor mask = Tensor::empty(out.shape());  // (N, H): 1 / (1 - p), or 0 where dropped or ReLU's output is 0
    if (mode_->training && p_ > 0.0f) {
      const uint64_t key = kernels::dropout_key(mode_->seed, mode_->step, layer_);
      const GraphConv::OutputBlock block = conv_.output_block();
      if (block.nodes == nullptr) {
        kernels::dropout_forward(out.f32(), mask.f32(), out.f32(), out.numel(), p_, key);
      } else {  // the masks the whole output would draw, at this block's nodes and columns
        kernels::dropout_forward_block(out.f32(), mask.f32(), out.f32(), out.size(0), out.size(1), block.nodes->data(),
                                       block.col0, conv_.out_features(), p_, key);
      }
    } else {
      std::fill(mask.f32(), mask.f32() + mask.numel(), 1.0f);
    }
    kernels::relu_backward(mask.f32(), out.f32(), mask.numel());  // the gate: mask where out > 0, else 0
    ctx.save(this, {mask});
    return out;
  }
  Tensor backward_impl(const Tensor& dy, Context& ctx) override {
    const Tensor& mask = ctx.saved(this, 0);
    Tensor dx = Tensor::empty(dy.shape());
    kernels::dropout_backward(dx.f32(), dy.f32(), mask.f32(), dx.numel());
    kernels::relu_backward(dx.f32(), mask.f32(), dx.numel());  // +0 where gated (dy * 0 may be -0)
    ctx.release(this);
    return dx;
  }

 private:
  float p_;
  uint64_t layer_;
  std::shared_ptr<const DropoutMode> mode_;
  const GraphConv& conv_;
};

// The whole (in, out) weight, drawn the same on every rank (a parallel layer keeps its block).
void glorot_uniform(GraphConv& conv, std::mt19937_64& rng) {
  const int64_t in = conv.in_features(), out = conv.out_features();
  const double limit = std::sqrt(6.0 / static_cast<double>(in + out));
  std::uniform_real_distribution<double> dist(-limit, limit);
  Tensor w = Tensor::empty({in, out}, DType::F32, MemoryCategory::Other);
  for (int64_t i = 0; i < w.numel(); ++i) w.f32()[i] = static_cast<float>(dist(rng));
  conv.set_weight(w);
}

}  // namespace

GCN::GCN(const GcnConfig& config, int64_t F, int64_t K, std::shared_ptr<const GraphOperator> graph, uint64_t seed,
         const LayerBuilder& builder)
    : graph_(std::move(graph)), mode_(std::make_shared<DropoutMode>()) {
  config.validate();
  mode_->seed = seed;
  std::mt19937_64 rng(seed);
  int64_t in = F;
  for (int64_t l = 0; l < config.layers; ++l) {
    const int64_t out = l + 1 == config.layers ? K : config.hidden;
    GraphConv& conv = register_module("conv" + std::to_string(l), builder.graph_conv(in, out, l, graph_, l > 0));
    glorot_uniform(conv, rng);
    convs_.push_back(&conv);
    if (l + 1 < config.layers)
      activations_.push_back(&register_module(
          "act" + std::to_string(l),
          std::make_unique<ReluDropout>(static_cast<float>(config.dropout), static_cast<uint64_t>(l), mode_, conv)));
    in = out;
  }
}

Tensor GCN::forward_impl(const Tensor& x, Context& ctx) {
  Tensor h = x;
  for (size_t l = 0; l < convs_.size(); ++l) {
    h = convs_[l]->forward(h, ctx);
    if (l < activations_.size()) h = activations_[l]->forward(h, ctx);
  }
  return h;
}

Tensor GCN::backward_impl(const Tensor& dlogits, Context& ctx) {
  Tensor d = dlogits;
  for (size_t l = convs_.size(); l-- > 0;) {
    if (l < activations_.size()) d = activations_[l]->backward(d, ctx);
    d = convs_[l]->backward(d, ctx);
  }
  return d;  // undefined: the first layer computes no input gradient
}

}  // namespace loom::nn
