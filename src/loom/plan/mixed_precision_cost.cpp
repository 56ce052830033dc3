#include "loom/plan/mixed_precision_cost.hpp"

#include <algorithm>

namespace loom::plan {

StateBytes mixed_precision_state_bytes(int64_t params, int64_t fp32_read_params, int shards, int zero_stage,
                                       int64_t optimizer_bytes_per_param, int64_t kept_params,
                                       int64_t gemm_free_params) {
  const int64_t n = shards > 0 ? shards : 1, rounded = params - kept_params;  // those with a bf16 value
  StateBytes s;
  if (zero_stage == 0) {
    s.params = 4 * params + 2 * (rounded - gemm_free_params);  // a copy of what the GEMMs read
  } else if (zero_stage < 3) {
    s.params = 2 * rounded + 4 * fp32_read_params + 4 * rounded / n + 4 * kept_params;
  } else {
    s.params = (4 + 2) * rounded / n + 4 * kept_params / n;
  }
  s.grads = zero_stage >= 2 ? 4 * params / n : 4 * params;
  s.optimizer = zero_stage >= 1 ? optimizer_bytes_per_param * params / n : optimizer_bytes_per_param * params;
  return s;
}

StateBytes unsharded_state_bytes(int64_t params, int64_t bf16_copies, int64_t optimizer_bytes_per_param) {
  StateBytes s = model_state_bytes(params, 1, 0, optimizer_bytes_per_param);
  s.params += 2 * bf16_copies;
  return s;
}

int64_t bf16_state_bytes(int64_t params_here, int64_t gemm_only_params, int64_t dp, int zero_stage,
                         int64_t kept_params, int64_t gemm_free_params) {
  return mixed_precision_state_bytes(params_here, params_here - gemm_only_params - kept_params, static_cast<int>(dp),
                                     zero_stage, 8, kept_params, gemm_free_params)
      .total();
}

int64_t bf16_activation_bytes_per_layer(int64_t B, int64_t T, int64_t C, int64_t NH, int64_t t,
                                        bool sequence_parallel, int64_t cp) {
  if (cp > 1) T /= cp;                                // this rank's tokens
  const int64_t Tr = sequence_parallel ? T / t : T;  // tokens of the replicated regions held here
  const int64_t linear_inputs = 2 * B * Tr * C + B * T * C / t + 4 * B * T * C / t;  // qkv, fc; proj; MLP proj
  const int64_t ln_inputs = 2 * B * Tr * C, mlp_hidden = 4 * B * T * C / t, stats = 4 * B * Tr;
  // q, k, v and the rows' log-sum-exp in fp32, from which backward recomputes the
  // probabilities; ring attention also keeps its output, the very copy the projection keeps
  // as its input (counted above).
  const int64_t core = 2 * 3 * B * T * C / t + 4 * NH * B * T / t;
  return 2 * (ln_inputs + mlp_hidden + linear_inputs) + core + 4 * stats;
}

namespace {
// Heads in the largest group when a group holds `fit` heads' fp32 scores of `values` each:
// whole sequences (all NH heads) while they fit, else `fit` heads of one sequence.
int64_t largest_group_heads(int64_t B, int64_t NH, int64_t budget_bytes, int64_t values) {
  const int64_t fit = std::max<int64_t>(1, budget_bytes / (values * 4));
  return fit >= NH ? std::min(B, fit / NH) * NH : fit;
}
}  // namespace

int64_t attention_group_values(int64_t B, int64_t T, int64_t NH) {
  return largest_group_heads(B, NH, kAttentionGroupBytes, T * T) * T * T;
}

int64_t bf16_attention_backward_bytes(int64_t B, int64_t T, int64_t C, int64_t NH, int64_t t) {
  const int64_t blocks = T >= 64 ? std::min<int64_t>(8, T / 64) : 1, R = (T + blocks - 1) / blocks, HS = C / NH;
  // Heads in groups whose one block of fp32 scores fits kAttentionBlockGroupBytes.
  const int64_t heads = largest_group_heads(B, NH / t, kAttentionBlockGroupBytes, R * T);
  // A block's scores, probabilities' gradient (fp32 and bf16 each), its rows of q, dout (bf16)
  // and output (fp32), the keys and values up to its end (bf16) and their gradients (fp32), its
  // rows' log-sum-exp and 1 / sum (fp32).
  return heads * (R * T * (4 + 2 + 4 + 2) + R * HS * (2 + 2 + 4) + T * HS * (2 + 2 + 4 + 4) + R * (4 + 4));
}

}  // namespace loom::plan
