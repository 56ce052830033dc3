// The layer builder that makes a model context-parallel over the cp ranks (layer
// substitution, docs/architecture.md): every layer is the inner builder's (serial), except
// the attention core, which becomes ring attention over the cp group, and the embedding,
// whose position rows are the true positions of this rank's chunks of the sequence.
#pragma once

#include <memory>

#include "loom/comm/process_group.hpp"
#include "loom/nn/embedding.hpp"
#include "loom/nn/layer_builder.hpp"
#include "loom/parallel/context_parallel/ring_attention.hpp"

namespace loom::parallel::cp {

// Token + position embedding of this rank's two chunks: position rows start at each chunk's
// place in the whole sequence (load_balance.hpp), so the model sees the serial positions.
class ContextParallelEmbedding : public nn::Embedding {
 public:
  ContextParallelEmbedding(int64_t V, int64_t Vp, int64_t block_size, int64_t C, int rank, int cp, Split split);

 protected:
  Tensor forward_impl(const Tensor& idx, nn::Context& ctx) override;  // (B, T/cp) -> (B, T/cp, C)
  Tensor backward_impl(const Tensor& dy, nn::Context& ctx) override;

 private:
  std::array<int64_t, 2> first_positions(int64_t local_T) const;
  int rank_, cp_;
  Split split_;
};

class ContextParallelLayers : public nn::LayerBuilder {
 public:
  ContextParallelLayers(comm::ProcessGroup& group, Split split)
      : group_(group), split_(split), stats_(std::make_shared<RingStats>()) {}

  std::unique_ptr<nn::Module> attention(int64_t C, int64_t NH) const override;
  std::unique_ptr<nn::Embedding> embedding(int64_t V, int64_t Vp, int64_t block_size, int64_t C) const override;
  // The rings' time (all layers) since the last reset.
  RingStats& stats() const { return *stats_; }

 private:
  comm::ProcessGroup& group_;
  Split split_;
  std::shared_ptr<RingStats> stats_;
};

}  // namespace loom::parallel::cp
