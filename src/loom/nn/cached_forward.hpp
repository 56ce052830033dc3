// The GPT's forward for generation: new tokens run through the model against a KV cache
// (their keys and values appended to it), attending to every earlier token of their own
// sequence. Prefill is one call with a prompt's tokens; a decode step is one call with one
// token of each sequence in the batch. Inference only: nothing is saved for a backward, and
// the projections of a decode step use the few-rows kernel (kernels/gemv.hpp).
// The layers are the model's own, so a tensor-parallel model splits heads and MLP here as
// in training, each rank caching its heads. A mixture-of-experts block routes each new token
// alone (MoE::forward_tokens: routing that cannot drop is per token); its experts are replicated
// over tp as in training, so every tp rank runs them on the same rows.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/kernels/packed_weights.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/nn/kv_cache.hpp"

namespace loom::nn {

// loom::Error unless the model's forward over a sequence gives each token what it gives
// the token's prefix alone (every model but one whose experts may drop tokens over capacity:
// 0 < moe_capacity_factor < E / K);
// forward_cached checks it too, before it claims any position.
void check_kv_cacheable(GPT& model);

// tokens[n] belongs to the sequence in slots[n] and takes its next position. Returns the
// logits (R, V) of the rows listed in logit_rows (every rank gets the whole vocabulary).
// packed: the caller's packed weights for steps of more rows than the GEMV takes (null:
// oneDNN on the plain weights); the same logits either way, up to the sums' order.
Tensor forward_cached(GPT& model, KVCache& cache, const std::vector<int32_t>& tokens, const std::vector<int64_t>& slots,
                      const std::vector<int64_t>& logit_rows, kernels::PackedWeights* packed = nullptr);

}  // namespace loom::nn
