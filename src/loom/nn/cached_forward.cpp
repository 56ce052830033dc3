#include "loom/nn/cached_forward.hpp"

#include <map>
#include <string>

#include "loom/error.hpp"
#include "loom/kernels/cached_attention.hpp"
#include "loom/kernels/gemv.hpp"
#include "loom/kernels/matmul.hpp"
#include "loom/kernels/packed_weights.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/kernels/residual.hpp"
#include "loom/nn/moe.hpp"

namespace loom::nn {

namespace {

// Positions for the new tokens, checked before any is claimed so a refused call leaves the
// cache as it was.
std::vector<int64_t> claim_positions(KVCache& cache, const std::vector<int64_t>& slots) {
  std::map<int64_t, int64_t> added;
  for (int64_t s : slots) {
    check(s >= 0 && s < cache.slots(), "KV cache slot ", s, " out of range [0, ", cache.slots(), ")");
    check(cache.length(s) + ++added[s] <= cache.capacity(), "the sequence in KV cache slot ", s,
          " would exceed the context of ", cache.capacity(), " tokens (block_size)");
  }
  std::vector<int64_t> positions;
  for (int64_t s : slots) positions.push_back(cache.claim_position(s));
  return positions;
}

// (R, V) logits of the chosen rows of x (N, C): final LayerNorm, the tied head, then the
// whole vocabulary on every rank (the tensor-parallel head holds a slice of it).
Tensor head_logits(GPT& model, const Tensor& x, const std::vector<int64_t>& rows, Context& ctx) {
  const int64_t C = x.size(-1), R = static_cast<int64_t>(rows.size());
  Tensor picked = Tensor::empty({R, C});
  for (int64_t r = 0; r < R; ++r) {
    check(rows[r] >= 0 && rows[r] < x.size(0), "logit row ", rows[r], " out of range [0, ", x.size(0), ")");
    std::copy(x.f32() + rows[r] * C, x.f32() + (rows[r] + 1) * C, picked.f32() + r * C);
  }
  const Tensor h = model.ln_f().forward(picked, ctx);  // (R, C)
  Parameter& head = model.head_weight();               // (Vp/t, C)
  const kernels::Operand wte = head.gemm_operand();     // bf16 in bf16 precision
  const int64_t Vl = head.value().size(0);
  Tensor local = Tensor::empty({R, Vl});
  if (R <= kernels::kGemvMaxRows)
    kernels::gemv_rows(h.f32(), wte, nullptr, local.f32(), R, Vl, C);
  else if (ctx.packed_weights() != nullptr && R <= kernels::kPackedMaxRows)
    ctx.packed_weights()->matmul(h.f32(), wte, nullptr, local.f32(), R, Vl, C);
  else
    kernels::matmul(h.f32(), kernels::Trans::N, wte, kernels::Trans::T, local.f32(), R, Vl, C);
  const Tensor full = model.layers().gather_vocabulary(local);  // (R, Vp)
  const int64_t V = model.config().vocab_size, Vp = full.size(1);
  Tensor logits = Tensor::empty({R, V});
  for (int64_t r = 0; r < R; ++r) std::copy(full.f32() + r * Vp, full.f32() + r * Vp + V, logits.f32() + r * V);
  return logits;
}

}  // namespace

void check_kv_cacheable(GPT& model) {
  for (const auto& block : model.blocks()) {
    if (block->moe() == nullptr) continue;
    const std::string why = block->moe()->kv_cacheable();
    check(why.empty(), "block '", block->name(), "' is a mixture of experts: ", why,
          "; sample it with `loom sample --prompt TEXT --no-kv-cache` on one process (the whole context re-run for "
          "every token, as training's forward runs it): loom generate, --prompts-file and --tp need the KV cache");
  }
}

Tensor forward_cached(GPT& model, KVCache& cache, const std::vector<int32_t>& tokens, const std::vector<int64_t>& slots,
                      const std::vector<int64_t>& logit_rows, kernels::PackedWeights* packed) {
  const int64_t N = static_cast<int64_t>(tokens.size());
  check(N > 0 && slots.size() == tokens.size(), "forward_cached needs one slot per token (", N, " tokens, ",
        slots.size(), " slots)");
  check(cache.dtype() == DType::F32 || kernels::compute_precision() == kernels::Precision::BF16,
        "a bf16 KV cache holds bf16 decoding's keys and values; fp32 decoding needs an fp32 cache");
  check_kv_cacheable(model);
  const std::vector<int64_t> positions = claim_positions(cache, slots);
  Context ctx;
  ctx.set_inference(true);
  ctx.set_packed_weights(packed);
  Tensor x = model.embedding().embed_at(tokens.data(), positions.data(), N);  // (N, C)
  const kernels::CacheGeometry& g = cache.geometry();
  for (size_t l = 0; l < model.blocks().size(); ++l) {
    Block& block = *model.blocks()[l];
    const Tensor qkv = block.attn().qkv().forward(block.ln1().forward(x, ctx), ctx);  // (N, 3C/t)
    const int64_t b = static_cast<int64_t>(l);
    Tensor heads = Tensor::empty({N, g.NH * g.HS});  // (N, C/t) this rank's heads
    auto attend = [&](auto* keys, auto* values) {  // the cache's element type: float or bfloat16
      kernels::cache_append(keys, values, qkv.f32(), slots.data(), positions.data(), N, g);
      kernels::cached_attention(heads.f32(), qkv.f32(), keys, values, slots.data(), positions.data(), N, g);
    };
    if (cache.dtype() == DType::BF16)
      attend(cache.keys(b).bf16(), cache.values(b).bf16());
    else
      attend(cache.keys(b).f32(), cache.values(b).f32());
    Tensor a = block.attn().proj().forward(heads, ctx);  // (N, C), summed over the tp group
    kernels::residual_forward(a.f32(), a.f32(), x.f32(), a.numel());
    const Tensor h = block.ln2().forward(a, ctx);  // (N, C)
    Tensor m = block.moe() != nullptr ? block.moe()->forward_tokens(h, ctx) : block.mlp().forward(h, ctx);
    kernels::residual_forward(m.f32(), m.f32(), a.f32(), m.numel());
    x = m;
    ctx.clear();
  }
  return head_logits(model, x, logit_rows, ctx);
}

}  // namespace loom::nn
