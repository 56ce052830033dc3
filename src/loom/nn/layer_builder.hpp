// How a model makes the layers that tensor parallelism splits (docs/architecture.md). The
// default builds the serial layers; parallel/tensor_parallel supplies a builder whose
// layers hold a 1/t slice of each weight and communicate inside their forward/backward, as
// Megatron-LM substitutes its parallel layers, so the model's code is the same for every
// layout.
#pragma once

#include <cstdint>
#include <memory>

#include "loom/nn/embedding.hpp"
#include "loom/nn/linear.hpp"
#include "loom/nn/moe.hpp"

namespace loom::nn {

class LayerBuilder {
 public:
  virtual ~LayerBuilder() = default;

  // t: how many ranks share each layer (attention heads and MLP width are split t ways).
  virtual int64_t tensor_parallel_size() const { return 1; }
  // Output features split across the ranks; with blocks > 1 each of that many equal blocks
  // is split separately (a fused QKV projection: every rank gets its heads' q, k and v).
  virtual std::unique_ptr<Linear> column_parallel_linear(int64_t in, int64_t out, int64_t blocks = 1) const;
  // Input features split; the ranks' partial outputs are summed.
  virtual std::unique_ptr<Linear> row_parallel_linear(int64_t in, int64_t out) const;
  // Token + position embedding; tensor parallel: the vocabulary rows split.
  virtual std::unique_ptr<Embedding> embedding(int64_t V, int64_t Vp, int64_t block_size, int64_t C) const;
  // The tied LM head multiplies the whole sequence's activations by a vocabulary-split
  // weight (the f operator around it): head_input gathers a sequence-parallel x, and
  // head_input_gradient sums the ranks' partial input gradients (reduce-scattered back to
  // sequence chunks under sequence parallelism).
  virtual Tensor head_input(const Tensor& x) const { return x; }
  // How the token table is split (by vocabulary rows under tensor parallelism).
  virtual ShardSpec vocabulary_shard() const { return {}; }
  virtual Tensor head_input_gradient(const Tensor& dx) const { return dx; }
  // A mixture of experts in place of a block's MLP; expert parallel: this rank's experts,
  // the tokens exchanged with the other `ep` ranks.
  virtual std::unique_ptr<MoE> mixture_of_experts(int64_t C, const MoeConfig& config) const;
};

// The serial layers.
const LayerBuilder& serial_layers();

}  // namespace loom::nn
