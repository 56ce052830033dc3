#include "loom/parallel/context_parallel/context_parallel_layers.hpp"

namespace loom::parallel::cp {

std::unique_ptr<nn::AttentionCore> ContextParallelLayers::attention(int64_t C, int64_t NH) const {
  return std::make_unique<RingAttention>(C, NH, group_, split_, stats_);
}

std::unique_ptr<nn::Embedding> ContextParallelLayers::embedding(int64_t V, int64_t Vp, int64_t block_size,
                                                                int64_t C) const {
  std::unique_ptr<nn::Embedding> e = inner_.embedding(V, Vp, block_size, C);
  // T local rows are this rank's two chunks of a sequence of T x cp tokens.
  e->set_position_map([rank = group_.rank(), cp = group_.size(), split = split_](int64_t T) {
    return positions_of(T * cp, rank, cp, split);
  });
  return e;
}

}  // namespace loom::parallel::cp
