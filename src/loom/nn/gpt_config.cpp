// GPTConfig: the model's sizes, their validation and the counts derived from them
// (parameters, FLOPs). Apart from the model so the config readers need nothing else.
#include "loom/nn/gpt.hpp"

#include "loom/error.hpp"

namespace loom::nn {

int64_t GPTConfig::resolved_padded_vocab() const {
  return padded_vocab_size > 0 ? padded_vocab_size : (vocab_size + 63) / 64 * 64;
}

int64_t GPTConfig::padded_vocab_for(int64_t tp) const { return (vocab_size + 64 * tp - 1) / (64 * tp) * 64 * tp; }

void GPTConfig::validate(bool vocabulary_known) const {
  check(vocab_size >= 1, "vocab_size must be >= 1, got ", vocab_size);
  check(padded_vocab_size >= 0, "padded_vocab_size must be >= 0 (0: the vocabulary rounded up), got ",
        padded_vocab_size);
  check(!vocabulary_known || resolved_padded_vocab() >= vocab_size, "padded_vocab_size (", padded_vocab_size,
        ") must be >= the vocabulary's size (", vocab_size, ")");
  check(block_size >= 1, "block_size must be >= 1, got ", block_size);
  check(n_layer >= 1, "n_layer must be >= 1, got ", n_layer);
  check(n_head >= 1, "n_head must be >= 1, got ", n_head);
  check(n_embd >= 1, "n_embd must be >= 1, got ", n_embd);
  check(n_embd % n_head == 0, "n_embd (", n_embd, ") must be divisible by n_head (", n_head, ")");
  check(hidden_dropout >= 0.0 && hidden_dropout < 1.0, "hidden_dropout must be in [0, 1), got ", hidden_dropout);
  check(attention_dropout >= 0.0 && attention_dropout < 1.0, "attention_dropout must be in [0, 1), got ",
        attention_dropout);
  moe.validate();
  check(!moe.enabled() || moe.every <= n_layer, "moe_every (", moe.every, ") is more than n_layer (", n_layer,
        "): no block would be a mixture of experts");
}

int64_t GPTConfig::num_parameters(int64_t tp) const {
  const int64_t C = n_embd;
  // Split by tp: qkv (weight + bias), attention proj weight, fc (weight + bias), MLP proj weight.
  const int64_t split = (3 * C * C + 3 * C) + C * C + (4 * C * C + 4 * C) + 4 * C * C;
  const int64_t replicated = 2 * C + C + 2 * C + C;  // two LayerNorms, the two row-parallel biases
  // A mixture-of-experts block holds E expert MLPs (whole on every tp rank) and a router
  // instead of the dense MLP.
  const int64_t mlp = (4 * C * C + 4 * C) + 4 * C * C + C;
  int64_t moe_blocks = 0;
  for (int64_t l = 0; l < n_layer; ++l) moe_blocks += moe.is_moe_block(l) ? 1 : 0;
  const int64_t moe_extra = moe_blocks * (moe.experts * mlp + moe.experts * C - ((mlp - C) / tp + C));
  return resolved_padded_vocab() / tp * C + block_size * C + n_layer * (split / tp + replicated) + 2 * C + moe_extra;
}

double GPTConfig::flops_per_token(int64_t T) const {
  const double C = static_cast<double>(n_embd), L = static_cast<double>(n_layer);
  // Active FLOPs: a token visits K experts of an MoE block (and its router), so such a block
  // does K MLPs' GEMMs.
  double moe_blocks = 0;
  for (int64_t l = 0; l < n_layer; ++l) moe_blocks += moe.is_moe_block(l) ? 1.0 : 0.0;
  const double moe_extra = moe_blocks * (static_cast<double>(moe.top_k - 1) * 8.0 * C * C + static_cast<double>(moe.experts) * C);
  const double matmul_params = L * 12.0 * C * C + moe_extra + static_cast<double>(resolved_padded_vocab()) * C;
  const double attention = L * 2.0 * 2.0 * static_cast<double>(T) * C;  // QK^T and PV, per token
  return 3.0 * (2.0 * matmul_params + attention);
}

}  // namespace loom::nn
