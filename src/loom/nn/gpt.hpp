// GPT-2 style language model: token + position embedding, L pre-LayerNorm blocks, final
// LayerNorm, LM head tied to the token embedding. forward maps token ids (B, T) to logits
// (B, T, Vp) (tensor parallel: this rank's Vp/t vocabulary columns); the loss lives in
// cross_entropy_loss.hpp so a pipeline's last stage can own it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/nn/block.hpp"
#include "loom/nn/embedding.hpp"
#include "loom/nn/init.hpp"
#include "loom/nn/layer_builder.hpp"
#include "loom/nn/lm_head.hpp"

namespace loom::nn {

struct GPTConfig {
  int64_t vocab_size = 65;        // V: real tokens
  int64_t padded_vocab_size = 0;  // Vp: 0 means V rounded up to a multiple of 64 (faster GEMMs)
  int64_t block_size = 256;       // maximum T
  int64_t n_layer = 6;            // L
  int64_t n_head = 6;             // NH
  int64_t n_embd = 384;           // C
  bool recompute = false;         // activation recompute in every block
  bool selective_recompute = false;  // attention's probabilities recomputed in backward, not kept
  double hidden_dropout = 0.0;    // p on the embedding's and every branch's output, while training
  double attention_dropout = 0.0; // p on every attention probability, while training
  MoeConfig moe{};                // mixture-of-experts blocks (none by default)

  int64_t resolved_padded_vocab() const;
  // The padding padded_vocab_size 0 means under tensor parallelism over tp ranks: V rounded up
  // to a multiple of 64 x tp, so each rank's slice stays a multiple of 64 rows.
  int64_t padded_vocab_for(int64_t tp) const;
  // Throws loom::Error naming every impossible value.
  // vocabulary_known: whether vocab_size is the data's yet. A training config holds a
  // placeholder until its tokenizer is read (train::GptSpec validates again then), so
  // padded_vocab_size is only compared with the real vocabulary.
  void validate(bool vocabulary_known = true) const;
  // Parameters, counted once (the LM head is tied); with tp > 1 those one tensor-parallel
  // rank holds (its slice of the split matrices, the vocabulary and their biases, plus every
  // replicated LayerNorm, position table and row-parallel bias).
  int64_t num_parameters(int64_t tp = 1) const;
  // Training FLOPs per token (forward + backward = 3x forward), GEMMs and attention.
  double flops_per_token(int64_t T) const;
};

// The part of the model a pipeline stage (or one interleaved chunk of it) holds: blocks
// [first_block, end_block), the embedding on the first stage, the final LayerNorm and the
// tied LM head on the last. The default is the whole model. A stage with the head but not
// the embedding keeps its own copy of the token table ("embedding.wte"), initialised alike;
// the pipeline sums the two copies' gradients so they stay equal.
struct GPTStage {
  int64_t first_block = 0;
  int64_t end_block = -1;  // -1: n_layer
  bool embedding = true;
  bool head = true;
};

class GPT : public Module {
 public:
  // The LM head's backward converts the logits' gradient to bf16 this many rows at a time (lm_head.hpp).
  static constexpr int64_t kHeadGradientRows = nn::kHeadGradientRows;

  // layers: serial, or tensor-parallel (parallel/tensor_parallel) for a 1/t slice per rank.
  // forward maps token ids (stage with the embedding) or activations (B, T, C) to logits
  // (stage with the head) or activations; backward returns the input gradient (undefined
  // on the embedding's stage).
  GPT(const GPTConfig& config, uint64_t seed, const LayerBuilder& layers = serial_layers(), GPTStage stage = {});
  const GPTConfig& config() const { return config_; }
  const GPTStage& stage() const { return stage_; }
  const LayerBuilder& layers() const { return layers_; }
  bool has_embedding() const { return embedding_ != nullptr; }
  bool has_head() const { return ln_f_ != nullptr; }
  Embedding& embedding();
  // The LM head's weight: the embedding's token table, or this stage's copy of it.
  Parameter& head_weight();
  std::vector<Block*>& blocks() { return blocks_; }
  LayerNorm& ln_f() { return *ln_f_; }

 protected:
  Tensor forward_impl(const Tensor& idx, Context& ctx) override;  // (B, T) i32 -> (B, T, Vp)
  Tensor backward_impl(const Tensor& dlogits, Context& ctx) override;

 private:
  void init_weights(uint64_t seed);

  GPTConfig config_;
  const LayerBuilder& layers_;
  GPTStage stage_;
  Embedding* embedding_ = nullptr;
  HiddenDropout embedding_dropout_;
  std::vector<Block*> blocks_;
  LayerNorm* ln_f_ = nullptr;
  Parameter* head_copy_ = nullptr;  // the head's token table on a stage without the embedding
};

}  // namespace loom::nn
