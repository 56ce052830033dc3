// Token + learned position embedding, the GPT input layer. The token table is also the
// LM head's weight (tied), so its gradient has two contributions per backward.
#pragma once

#include "loom/nn/module.hpp"

namespace loom::nn {

class Embedding : public Module {
 public:
  Embedding(int64_t vocab_size, int64_t padded_vocab_size, int64_t block_size, int64_t C);
  Parameter& wte() { return *wte_; }
  Parameter& wpe() { return *wpe_; }
  // Generation: (N, C) rows wte[ids[n]] + wpe[positions[n]], nothing saved for backward.
  virtual Tensor embed_at(const int32_t* ids, const int64_t* positions, int64_t N);

 protected:
  Tensor forward_impl(const Tensor& idx, Context& ctx) override;  // idx (B, T) i32 -> (B, T, C)
  Tensor backward_impl(const Tensor& dy, Context& ctx) override;  // returns an undefined tensor

  int64_t V_, block_size_, C_;
  Parameter* wte_;  // (Vp, C)
  Parameter* wpe_;  // (block_size, C)
};

}  // namespace loom::nn
