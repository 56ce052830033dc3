// Per-rank model-state memory of data-parallel training (Rajbhandari et al., ZeRO, 2020):
// with P parameters, N data-parallel ranks and fp32 Adam (4 bytes value, 4 grad, 8 moments),
//   stage 0 (DDP) 16P; stage 1 (optimizer sharded) 8P + 8P/N; stage 2 (+ grads) 4P + 12P/N;
//   stage 3 (+ parameters) 16P/N. Pure functions: the trainer prints them next to what the
// memory tracker measured, and the planner prices layouts with them.
#pragma once

#include <cstdint>

namespace loom::plan {

struct StateBytes {
  int64_t params = 0;
  int64_t grads = 0;
  int64_t optimizer = 0;
  int64_t total() const { return params + grads + optimizer; }
};

// fp32 training; mixed precision: mixed_precision_cost.hpp.
// optimizer_bytes_per_param: 8 for AdamW (two moments), 4 for SGD with momentum.
StateBytes model_state_bytes(int64_t params, int dp, int zero_stage, int64_t optimizer_bytes_per_param);

// Activation bytes one transformer layer keeps for backward, per rank, for a micro-batch of
// B sequences of T tokens, width C, NH heads, tensor-parallel degree t. Loom's counterpart
// of Korthikanti et al. (2022), sbh(34 + 5as/h) in fp16 with dropout masks: Loom keeps fp32
// and has no dropout, so per layer
//   4 BTC (the inputs of ln1, qkv, ln2, fc: replicated across tp; split t ways along the
//          sequence with sequence parallelism)
// + 12 BTC / t (q, k, v, the attention output, the MLP's pre- and post-GELU activations)
// + NH B T^2 / t (the softmax probabilities) + 4 BT (LayerNorm statistics, / t with SP),
// each times 4 bytes.
// Context parallelism (cp > 1) keeps T/cp tokens per rank, and ring attention keeps each
// row's log-sum-exp (NH B T/cp / t) instead of the probabilities; selective recompute keeps
// neither (backward recomputes the probabilities).
int64_t activation_bytes_per_layer(int64_t B, int64_t T, int64_t C, int64_t NH, int64_t t, bool sequence_parallel,
                                   int64_t cp = 1, bool selective = false);

}  // namespace loom::plan
