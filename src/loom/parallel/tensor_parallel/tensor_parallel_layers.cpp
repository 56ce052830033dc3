#include "loom/parallel/tensor_parallel/tensor_parallel_layers.hpp"

#include "loom/parallel/tensor_parallel/column_parallel_linear.hpp"
#include "loom/parallel/tensor_parallel/mappings.hpp"
#include "loom/parallel/tensor_parallel/row_parallel_linear.hpp"
#include "loom/parallel/tensor_parallel/vocab_parallel_embedding.hpp"
#include "loom/parallel/tensor_parallel/vocab_parallel_head.hpp"

namespace loom::parallel::tp {

std::unique_ptr<nn::Linear> TensorParallelLayers::column_parallel_linear(int64_t in, int64_t out, int64_t blocks) const {
  return std::make_unique<ColumnParallelLinear>(in, out, blocks, group_, sequence_parallel_, /*gather_output=*/false, overlap_);
}

std::unique_ptr<nn::Linear> TensorParallelLayers::row_parallel_linear(int64_t in, int64_t out) const {
  return std::make_unique<RowParallelLinear>(in, out, group_, sequence_parallel_, overlap_);
}

std::unique_ptr<nn::Embedding> TensorParallelLayers::embedding(int64_t V, int64_t Vp, int64_t block_size,
                                                               int64_t C) const {
  return std::make_unique<VocabParallelEmbedding>(V, Vp, block_size, C, group_, sequence_parallel_);
}

Tensor TensorParallelLayers::head_logits(const Tensor& x, nn::Parameter& w) const {
  return VocabParallelHead{group_, sequence_parallel_, overlap_}.logits(x, w);
}

Tensor TensorParallelLayers::head_backward(const Tensor& dlogits, const Tensor& kept, nn::Parameter& w) const {
  return VocabParallelHead{group_, sequence_parallel_, overlap_}.backward(dlogits, kept, w);
}

Tensor TensorParallelLayers::gather_vocabulary(const Tensor& logits) const {
  return gather_features(logits, /*blocks=*/1, group_, /*in_fp32=*/true);
}

}  // namespace loom::parallel::tp
