// The layer builder that makes a model tensor-parallel over a group of t ranks (layer
// substitution, docs/architecture.md): column- and row-parallel linears, a vocabulary-parallel embedding, and the
// f operator around the tied LM head, optionally with sequence parallelism. Pass it to nn::GPT.
#pragma once

#include "loom/comm/process_group.hpp"
#include "loom/nn/layer_builder.hpp"
#include "loom/parallel/group_sequence_parts.hpp"

namespace loom::parallel::tp {

class TensorParallelLayers : public nn::LayerBuilder {
 public:
  // sequence_parallel: activations outside the tensor-parallel regions are split along the
  // sequence (Korthikanti et al. 2022); the model's input and output stay whole.
  // overlap: the linear layers' and the LM head's collectives run under their GEMMs
  // (tp_overlap; see column_parallel_linear.hpp, row_parallel_linear.hpp and
  // vocab_parallel_head.hpp).
  TensorParallelLayers(comm::ProcessGroup& group, bool sequence_parallel, bool overlap = false)
      : group_(group), sequence_parallel_(sequence_parallel), overlap_(overlap) {}

  int64_t tensor_parallel_size() const override { return group_.size(); }
  int64_t first_head(int64_t NH) const override { return group_.rank() * NH; }
  std::unique_ptr<nn::Linear> column_parallel_linear(int64_t in, int64_t out, int64_t blocks) const override;
  std::unique_ptr<nn::Linear> row_parallel_linear(int64_t in, int64_t out) const override;
  std::unique_ptr<nn::Embedding> embedding(int64_t V, int64_t Vp, int64_t block_size, int64_t C) const override;
  // The tied head over this rank's vocabulary rows (vocab_parallel_head.hpp).
  Tensor head_logits(const Tensor& x, nn::Parameter& w) const override;
  Tensor head_backward(const Tensor& dlogits, const Tensor& kept, nn::Parameter& w) const override;
  nn::ShardSpec vocabulary_shard() const override { return nn::ShardSpec{0, group_.size(), group_.rank(), 1}; }
  Tensor gather_vocabulary(const Tensor& logits) const override;
  comm::ProcessGroup& group() const { return group_; }
  bool sequence_parallel() const { return sequence_parallel_; }
  // Under sequence parallelism every sequence is split over the tp ranks between the
  // tensor-parallel regions: a mixture of experts (replicated over tp) routes this rank's tokens
  // and sums its per-sequence statistics over tp, its gradients summed over tp like every
  // replicated parameter's.
  const nn::SequenceParts& sequence_parts() const override {
    return sequence_parallel_ ? static_cast<const nn::SequenceParts&>(parts_) : nn::whole_sequences();
  }

 private:
  comm::ProcessGroup& group_;
  bool sequence_parallel_;
  bool overlap_;
  GroupSequenceParts parts_{group_, /*gradients_summed=*/true, consecutive_chunk_of(group_)};
};

}  // namespace loom::parallel::tp
