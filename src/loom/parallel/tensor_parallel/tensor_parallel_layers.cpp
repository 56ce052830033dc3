#include "loom/parallel/tensor_parallel/tensor_parallel_layers.hpp"

#include "loom/parallel/tensor_parallel/column_parallel_linear.hpp"
#include "loom/parallel/tensor_parallel/mappings.hpp"
#include "loom/parallel/tensor_parallel/row_parallel_linear.hpp"
#include "loom/parallel/tensor_parallel/vocab_parallel_embedding.hpp"

namespace loom::parallel::tp {

std::unique_ptr<nn::Linear> TensorParallelLayers::column_parallel_linear(int64_t in, int64_t out, int64_t blocks) const {
  return std::make_unique<ColumnParallelLinear>(in, out, blocks, group_);
}

std::unique_ptr<nn::Linear> TensorParallelLayers::row_parallel_linear(int64_t in, int64_t out) const {
  return std::make_unique<RowParallelLinear>(in, out, group_);
}

std::unique_ptr<nn::Embedding> TensorParallelLayers::embedding(int64_t V, int64_t Vp, int64_t block_size,
                                                               int64_t C) const {
  return std::make_unique<VocabParallelEmbedding>(V, Vp, block_size, C, group_);
}

void TensorParallelLayers::sum_partial_input_gradient(Tensor& dx) const { f_backward(dx, group_); }

}  // namespace loom::parallel::tp
