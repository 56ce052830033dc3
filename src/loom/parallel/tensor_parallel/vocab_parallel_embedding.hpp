// VocabParallelEmbedding: the token table's rows (the padded vocabulary) split across the
// tensor-parallel group. Each rank looks up the tokens in its row range, writes zeros for
// the rest, and the g operator sums the ranks' rows into the full embedding; the position
// table is replicated and added after the sum. The same table is the tied LM head, whose
// logits then come out split by vocabulary (see vocab_parallel_cross_entropy.hpp).
#pragma once

#include "loom/comm/process_group.hpp"
#include "loom/nn/embedding.hpp"

namespace loom::parallel::tp {

class VocabParallelEmbedding : public nn::Embedding {
 public:
  // sequence_parallel: the output is this rank's chunk of the sequence (B, T/t, C), the
  // ranks' rows reduce-scattered instead of all-reduced.
  VocabParallelEmbedding(int64_t vocab_size, int64_t padded_vocab_size, int64_t block_size, int64_t C,
                         comm::ProcessGroup& group, bool sequence_parallel = false);
  // This rank's rows are token ids [vocab_begin, vocab_begin + rows).
  int64_t vocab_begin() const { return vocab_begin_; }

  // This rank's rows of the tokens' table entries, summed over the group, plus positions.
  Tensor embed_at(const int32_t* ids, const int64_t* positions, int64_t N) override;

 protected:
  Tensor forward_impl(const Tensor& idx, nn::Context& ctx) override;  // idx (B, T) -> (B, T, C)
  Tensor backward_impl(const Tensor& dy, nn::Context& ctx) override;

 private:
  comm::ProcessGroup& group_;
  int64_t vocab_begin_, rows_;
  bool sequence_parallel_;
};

}  // namespace loom::parallel::tp
