// The attention core of a self-attention layer (softmax(Q K^T / sqrt(HS) + causal mask) V from
// the QKV projection's output, no parameters), as every layout's layer builder makes it: the
// fused kernel over the rank's heads (causal_attention.hpp) or a ring over the sequence's ranks
// (context parallelism). What they share is attention dropout: while training, each probability
// is dropped before the product with V, its mask drawn from the probability's place in the
// step's whole batch (kernels/attention_dropout.hpp), so every layout drops what the serial run
// drops.
#pragma once

#include <cstdint>

#include "loom/kernels/attention_dropout.hpp"
#include "loom/nn/module.hpp"

namespace loom::nn {

// Where a core's dropout draws from.
struct AttentionDropoutSite {
  double p = 0.0;          // 0: off
  uint64_t site = 0;       // distinct from the model's other dropout sites
  int64_t block_size = 1;  // the training sequence length
  int64_t heads = 1;       // the model's heads
  int64_t first_head = 0;  // the model-wide index of this core's first head (tensor parallelism splits them)
};

class AttentionCore : public Module {
 public:
  void set_dropout(const AttentionDropoutSite& site) { dropout_ = site; }
  // Selective recompute (Megatron-LM's --recompute-granularity selective): the probabilities
  // are recomputed in backward instead of kept, where a core would keep them.
  void set_recompute_probabilities(bool on) { recompute_probabilities_ = on; }

 protected:
  bool recompute_probabilities() const { return recompute_probabilities_; }
  // The kernels' dropout in `ctx`: active in a training micro-batch's context (dropout rows
  // set) when p > 0; inactive in evaluation and generation.
  kernels::AttentionDropout dropout(const Context& ctx) const;

 private:
  AttentionDropoutSite dropout_;
  bool recompute_probabilities_ = false;
};

}  // namespace loom::nn
