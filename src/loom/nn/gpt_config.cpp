// GPTConfig: the model's sizes, their validation and the counts derived from them
// (parameters, FLOPs). Apart from the model so the config readers need nothing else.
#include "loom/nn/gpt.hpp"

#include "loom/error.hpp"

namespace loom::nn {

int64_t GPTConfig::resolved_padded_vocab() const {
  return padded_vocab_size > 0 ? padded_vocab_size : (vocab_size + 63) / 64 * 64;
}

void GPTConfig::validate() const {
  check(vocab_size >= 1, "vocab_size must be >= 1, got ", vocab_size);
  check(padded_vocab_size >= 0, "padded_vocab_size must be >= 0 (0: the vocabulary rounded up), got ",
        padded_vocab_size);
  check(resolved_padded_vocab() >= vocab_size, "padded_vocab_size (", padded_vocab_size,
        ") must be >= vocab_size (", vocab_size, ")");
  check(block_size >= 1, "block_size must be >= 1, got ", block_size);
  check(n_layer >= 1, "n_layer must be >= 1, got ", n_layer);
  check(n_head >= 1, "n_head must be >= 1, got ", n_head);
  check(n_embd >= 1, "n_embd must be >= 1, got ", n_embd);
  check(n_embd % n_head == 0, "n_embd (", n_embd, ") must be divisible by n_head (", n_head, ")");
}

int64_t GPTConfig::num_parameters(int64_t tp) const {
  const int64_t C = n_embd;
  // Split by tp: qkv (weight + bias), attention proj weight, fc (weight + bias), MLP proj weight.
  const int64_t split = (3 * C * C + 3 * C) + C * C + (4 * C * C + 4 * C) + 4 * C * C;
  const int64_t replicated = 2 * C + C + 2 * C + C;  // two LayerNorms, the two row-parallel biases
  return resolved_padded_vocab() / tp * C + block_size * C + n_layer * (split / tp + replicated) + 2 * C;
}

double GPTConfig::flops_per_token(int64_t T) const {
  const double C = static_cast<double>(n_embd), L = static_cast<double>(n_layer);
  const double matmul_params = L * 12.0 * C * C + static_cast<double>(resolved_padded_vocab()) * C;
  const double attention = L * 2.0 * 2.0 * static_cast<double>(T) * C;  // QK^T and PV, per token
  return 3.0 * (2.0 * matmul_params + attention);
}

}  // namespace loom::nn
