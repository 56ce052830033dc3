#include "loom/nn/moe_config.hpp"

#include "loom/error.hpp"

namespace loom::nn {

void MoeConfig::validate() const {
  check(experts >= 0, "moe_experts must be >= 0 (0: no mixture of experts), got ", experts);
  if (!enabled()) return;
  check(top_k >= 1 && top_k <= experts, "moe_top_k must be in [1, moe_experts (", experts, ")], got ", top_k);
  check(capacity_factor >= 0.0, "moe_capacity_factor must be >= 0 (0: dropless), got ", capacity_factor);
  check(every >= 1, "moe_every must be >= 1, got ", every);
  check(aux_loss_coef >= 0.0, "moe_aux_loss_coef must be >= 0, got ", aux_loss_coef);
  check(micro_batches >= 1, "MoE: micro_batches must be >= 1, got ", micro_batches);
}

}  // namespace loom::nn
