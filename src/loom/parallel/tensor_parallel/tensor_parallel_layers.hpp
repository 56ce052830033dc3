// The layer builder that makes a model tensor-parallel over a group of t ranks (DESIGN.md
// decision 3): column- and row-parallel linears, a vocabulary-parallel embedding, and the
// f operator for the tied LM head's input gradient. Pass it to nn::GPT.
#pragma once

#include "loom/comm/process_group.hpp"
#include "loom/nn/layer_builder.hpp"

namespace loom::parallel::tp {

class TensorParallelLayers : public nn::LayerBuilder {
 public:
  explicit TensorParallelLayers(comm::ProcessGroup& group) : group_(group) {}

  int64_t tensor_parallel_size() const override { return group_.size(); }
  std::unique_ptr<nn::Linear> column_parallel_linear(int64_t in, int64_t out, int64_t blocks) const override;
  std::unique_ptr<nn::Linear> row_parallel_linear(int64_t in, int64_t out) const override;
  std::unique_ptr<nn::Embedding> embedding(int64_t V, int64_t Vp, int64_t block_size, int64_t C) const override;
  void sum_partial_input_gradient(Tensor& dx) const override;
  comm::ProcessGroup& group() const { return group_; }

 private:
  comm::ProcessGroup& group_;
};

}  // namespace loom::parallel::tp
