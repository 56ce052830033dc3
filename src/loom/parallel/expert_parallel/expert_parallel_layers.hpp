// Expert parallelism by layer substitution: a layer builder that makes every mixture of
// experts hold this rank's E/ep experts and exchange tokens over the `ep` group; every other
// layer comes from the builder it wraps (serial, tensor or context parallel), so the model's
// code is unchanged.
#pragma once

#include "loom/nn/layer_builder.hpp"
#include "loom/parallel/expert_parallel/all_to_all_dispatcher.hpp"

namespace loom::parallel::ep {

class ExpertParallelLayers : public nn::LayerBuilder {
 public:
  // statistics: the ep ranks again, for the routing statistics (AllToAllDispatcher).
  ExpertParallelLayers(const nn::LayerBuilder& base, comm::ProcessGroup& ep, comm::ProcessGroup* statistics = nullptr)
      : base_(base), dispatcher_(ep, statistics) {}
  const AllToAllDispatcher& dispatcher() const { return dispatcher_; }

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
    return std::make_unique<nn::MoE>(C, config, dispatcher_, parts);
  }
  const nn::SequenceParts& sequence_parts() const override { return base_.sequence_parts(); }

 private:
  const nn::LayerBuilder& base_;
  AllToAllDispatcher dispatcher_;
};

}  // namespace loom::parallel::ep
