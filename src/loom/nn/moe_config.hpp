// The mixture-of-experts settings of the GPT (Switch Transformer / GShard routing): which
// blocks replace their MLP by E routed expert MLPs, how many experts each token visits,
// how many tokens an expert may take, and the weight of the load-balancing loss.
#pragma once

#include <cstdint>

namespace loom::nn {

struct MoeConfig {
  int64_t experts = 0;             // E; 0: every block keeps its dense MLP
  int64_t top_k = 2;               // K experts per token
  double capacity_factor = 0.0;    // f; each expert takes <= ceil(f K T / E) tokens of a sequence; 0: dropless
  int64_t every = 1;               // blocks N-1, 2N-1, ... are MoE blocks
  double aux_loss_coef = 0.01;     // weight of the Switch load-balancing loss
  // The aux loss is a per-micro-batch mean like the cross-entropy, so its gradient carries
  // the same 1/micro_batches the trainer gives the loss (set from the training config).
  int64_t micro_batches = 1;

  bool enabled() const { return experts > 0; }
  bool is_moe_block(int64_t layer) const { return enabled() && layer % every == every - 1; }
  // Throws loom::Error naming every impossible value.
  void validate() const;
};

}  // namespace loom::nn
