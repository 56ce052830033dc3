// Expert parallelism by layer substitution: a layer builder that makes every mixture of
// experts hold this rank's E/ep experts and exchange tokens over the `ep` group; every other
// layer comes from the builder it wraps (serial, tensor, 3D or context parallel), so the
// model's code is unchanged. On a 3D grid the dispatcher is GridExpertDispatcher (the plane
// and ep share the experts out), elsewhere AllToAllDispatcher.
#pragma once

#include <memory>

#include "loom/nn/layer_builder.hpp"
#include "loom/nn/moe.hpp"

namespace loom::parallel::ep {

class ExpertParallelLayers : public nn::LayerBuilder {
 public:
  // replica: which copy of this rank's experts it holds among the ranks of the model-parallel
  // group holding the same ones (its tp rank, or its depth rank on a 3D grid): replica 0's
  // are counted and saved.
  ExpertParallelLayers(const nn::LayerBuilder& base, std::unique_ptr<nn::ExpertDispatcher> dispatcher, int64_t replica)
      : base_(base), dispatcher_(std::move(dispatcher)), replica_(replica) {}

  int64_t tensor_parallel_size() const override { return base_.tensor_parallel_size(); }
  int64_t vocabulary_parts() const override { return base_.vocabulary_parts(); }
  std::unique_ptr<nn::AttentionCore> attention(int64_t C, int64_t NH) const override { return base_.attention(C, NH); }
  int64_t first_head(int64_t NH) const override { return base_.first_head(NH); }
  Tensor gather_vocabulary(const Tensor& logits) const override { return base_.gather_vocabulary(logits); }
  std::unique_ptr<nn::Linear> column_parallel_linear(int64_t in, int64_t out, int64_t blocks) const override {
    return base_.column_parallel_linear(in, out, blocks);
  }
  std::unique_ptr<nn::Linear> row_parallel_linear(int64_t in, int64_t out) const override {
    return base_.row_parallel_linear(in, out);
  }
  std::unique_ptr<nn::Embedding> embedding(int64_t V, int64_t Vp, int64_t block_size, int64_t C) const override {
    return base_.embedding(V, Vp, block_size, C);
  }
  Tensor head_logits(const Tensor& x, nn::Parameter& w) const override { return base_.head_logits(x, w); }
  Tensor head_backward(const Tensor& dlogits, const Tensor& kept, nn::Parameter& w) const override {
    return base_.head_backward(dlogits, kept, w);
  }
  nn::ShardSpec vocabulary_shard() const override { return base_.vocabulary_shard(); }
  std::unique_ptr<nn::MoE> mixture_of_experts_over(int64_t C, const nn::MoeConfig& config,
                                                   const nn::SequenceParts& parts) const override {
    auto moe = std::make_unique<nn::MoE>(C, config, *dispatcher_, parts);
    for (nn::Parameter* p : moe->experts().parameters()) {
      nn::ShardSpec spec = p->shard_spec();
      spec.replica = replica_;
      p->set_shard_spec(spec);
    }
    return moe;
  }
  const nn::SequenceParts& sequence_parts() const override { return base_.sequence_parts(); }

 private:
  const nn::LayerBuilder& base_;
  std::unique_ptr<nn::ExpertDispatcher> dispatcher_;
  int64_t replica_;
};

}  // namespace loom::parallel::ep
