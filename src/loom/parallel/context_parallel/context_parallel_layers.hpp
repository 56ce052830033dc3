// The layer builder that makes a model context-parallel over the cp ranks (layer
// substitution, docs/architecture.md). It wraps the builder the model would otherwise get
// (serial or tensor-parallel): every layer is that builder's, except the attention core,
// which becomes ring attention over the cp group, and the embedding, whose position rows
// are the true positions of this rank's chunks of the sequence.
#pragma once

#include <memory>

#include "loom/comm/process_group.hpp"
#include "loom/nn/layer_builder.hpp"
#include "loom/parallel/context_parallel/load_balance.hpp"
#include "loom/parallel/context_parallel/ring_attention.hpp"
#include "loom/parallel/group_sequence_parts.hpp"

namespace loom::parallel::cp {

class ContextParallelLayers : public nn::LayerBuilder {
 public:
  // inner outlives this builder (the recipe keeps both).
  ContextParallelLayers(const nn::LayerBuilder& inner, comm::ProcessGroup& group, Split split)
      : inner_(inner), group_(group), split_(split), stats_(std::make_shared<RingStats>()) {}

  std::unique_ptr<nn::AttentionCore> attention(int64_t C, int64_t NH) const override;
  int64_t first_head(int64_t NH) const override { return inner_.first_head(NH); }
  std::unique_ptr<nn::Embedding> embedding(int64_t V, int64_t Vp, int64_t block_size, int64_t C) const override;

  int64_t tensor_parallel_size() const override { return inner_.tensor_parallel_size(); }
  // The inner builder's (a 3D grid splits heads over row but not the token table: left to the
  // default, a pipeline's last stage split its copy of the table over row around a grid).
  int64_t vocabulary_parts() const override { return inner_.vocabulary_parts(); }
  Tensor gather_vocabulary(const Tensor& logits) const override { return inner_.gather_vocabulary(logits); }
  std::unique_ptr<nn::Linear> column_parallel_linear(int64_t in, int64_t out, int64_t blocks) const override {
    return inner_.column_parallel_linear(in, out, blocks);
  }
  std::unique_ptr<nn::Linear> row_parallel_linear(int64_t in, int64_t out) const override {
    return inner_.row_parallel_linear(in, out);
  }
  Tensor head_logits(const Tensor& x, nn::Parameter& w) const override { return inner_.head_logits(x, w); }
  Tensor head_backward(const Tensor& dlogits, const Tensor& kept, nn::Parameter& w) const override {
    return inner_.head_backward(dlogits, kept, w);
  }
  nn::ShardSpec vocabulary_shard() const override { return inner_.vocabulary_shard(); }
  // A mixture of experts sums its per-sequence statistics over the cp ranks (and over the
  // inner builder's parts: the tp ranks under sequence parallelism); the inner builder places
  // its experts (a 3D grid shares them out over its plane).
  const nn::SequenceParts& sequence_parts() const override { return parts_; }
  std::unique_ptr<nn::MoE> mixture_of_experts_over(int64_t C, const nn::MoeConfig& config,
                                                   const nn::SequenceParts& parts) const override {
    return inner_.mixture_of_experts_over(C, config, parts);
  }

  // The rings' time (all layers) since the last reset.
  RingStats& stats() const { return *stats_; }

 private:
  const nn::LayerBuilder& inner_;
  comm::ProcessGroup& group_;
  Split split_;
  std::shared_ptr<RingStats> stats_;
  GroupSequenceParts parts_{group_, /*gradients_summed=*/false,
                           [&g = group_, s = split_](int64_t length) { return positions_of(length, g.rank(), g.size(), s); },
                           inner_.sequence_parts()};
};

}  // namespace loom::parallel::cp
