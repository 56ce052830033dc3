// Token + learned position embedding, the GPT input layer. The token table is also the
// LM head's weight (tied), so its gradient has two contributions per backward.
#pragma once

#include <functional>
#include <vector>

#include "loom/nn/module.hpp"

namespace loom::nn {

class Embedding : public Module {
 public:
  Embedding(int64_t vocab_size, int64_t padded_vocab_size, int64_t block_size, int64_t C);
  Parameter& wte() { return *wte_; }
  Parameter& wpe() { return *wpe_; }
  // Where this rank's rows sit in the whole sequence when it holds pieces of it (context
  // parallelism): the true position of each of its T rows. Unset: rows 0 .. T-1.
  using PositionMap = std::function<std::vector<int64_t>(int64_t T)>;
  void set_position_map(PositionMap map) { position_map_ = std::move(map); }
  // Generation: (N, C) rows wte[ids[n]] + wpe[positions[n]], nothing saved for backward.
  virtual Tensor embed_at(const int32_t* ids, const int64_t* positions, int64_t N);

 protected:
  Tensor forward_impl(const Tensor& idx, Context& ctx) override;  // idx (B, T) i32 -> (B, T, C)
  Tensor backward_impl(const Tensor& dy, Context& ctx) override;  // returns an undefined tensor

  // The position of each of T local rows (position_map_, else 0 .. T-1).
  std::vector<int64_t> positions(int64_t T) const;

  int64_t V_, block_size_, C_;
  PositionMap position_map_;
  Parameter* wte_;  // (Vp, C)
  Parameter* wpe_;  // (block_size, C)
};

}  // namespace loom::nn
