// How a model makes the layers that tensor parallelism splits (docs/architecture.md). The
// default builds the serial layers; parallel/tensor_parallel supplies a builder whose
// layers hold a 1/t slice of each weight and communicate inside their forward/backward, as
// Megatron-LM substitutes its parallel layers, so the model's code is the same for every
// layout.
#pragma once

#include <cstdint>
#include <memory>

#include "loom/nn/attention_core.hpp"
#include "loom/nn/embedding.hpp"
#include "loom/nn/graph_conv.hpp"
#include "loom/nn/linear.hpp"
#include "loom/nn/moe.hpp"

namespace loom::nn {

class LayerBuilder {
 public:
  virtual ~LayerBuilder() = default;

  // t: how many ranks share each layer (attention heads and MLP width are split t ways).
  virtual int64_t tensor_parallel_size() const { return 1; }
  // How many ways the token table's rows are split (3D tensor parallelism splits heads, not
  // the vocabulary: 1 there).
  virtual int64_t vocabulary_parts() const { return tensor_parallel_size(); }
  // Output features split across the ranks; with blocks > 1 each of that many equal blocks
  // is split separately (a fused QKV projection: every rank gets its heads' q, k and v).
  virtual std::unique_ptr<Linear> column_parallel_linear(int64_t in, int64_t out, int64_t blocks = 1) const;
  // Input features split; the ranks' partial outputs are summed.
  virtual std::unique_ptr<Linear> row_parallel_linear(int64_t in, int64_t out) const;
  // The attention core of C features in NH heads: qkv (B, T, 3C) -> heads (B, T, C). Serial:
  // causal attention over the T rows; context parallel: a ring over the sequence's ranks.
  virtual std::unique_ptr<AttentionCore> attention(int64_t C, int64_t NH) const;
  // The model-wide index of the first of the NH heads this rank's attention computes (the
  // heads are split over tensor parallelism's ranks in rank order).
  virtual int64_t first_head(int64_t /*NH*/) const { return 0; }
  // Token + position embedding; tensor parallel: the vocabulary rows split.
  virtual std::unique_ptr<Embedding> embedding(int64_t V, int64_t Vp, int64_t block_size, int64_t C) const;
  // The tied LM head multiplies the whole sequence's activations by the token table w, a
  // vocabulary-split weight under tensor parallelism (the f operator around it): head_logits
  // gathers a sequence-parallel x (the final LayerNorm's output, fp32) and returns the logits
  // (B, T, V) of w's rows; head_backward adds dlogits^T x to w's gradient and returns x's
  // gradient, the ranks' partial ones summed (reduce-scattered back to sequence chunks under
  // sequence parallelism). kept: what the head kept of x (saved_activation: bf16 under mixed
  // precision). See lm_head.hpp.
  virtual Tensor head_logits(const Tensor& x, Parameter& w) const;
  virtual Tensor head_backward(const Tensor& dlogits, const Tensor& kept, Parameter& w) const;
  // How the token table is split (by vocabulary rows under tensor parallelism).
  virtual ShardSpec vocabulary_shard() const { return {}; }
  // Generation: the head's logits (R, Vp/t) on every rank -> the whole vocabulary (R, Vp).
  virtual Tensor gather_vocabulary(const Tensor& logits) const { return logits; }
  // Graph convolution `layer` of a GCN over the whole graph; a parallel builder returns one
  // holding its blocks of Â, the features and W (Plexus rotates its grid axes by layer).
  virtual std::unique_ptr<GraphConv> graph_conv(int64_t in, int64_t out, int64_t layer,
                                                std::shared_ptr<const GraphOperator> graph, bool input_gradient) const;
  // A mixture of experts in place of a block's MLP, its sequences split as sequence_parts() says.
  std::unique_ptr<MoE> mixture_of_experts(int64_t C, const MoeConfig& config) const {
    return mixture_of_experts_over(C, config, sequence_parts());
  }
  // The same with the parts a wrapping builder gives (context parallelism's): serially every
  // expert local; expert parallel: this rank's experts, the tokens exchanged with the other
  // `ep` ranks; on a 3D grid: this plane rank's experts.
  virtual std::unique_ptr<MoE> mixture_of_experts_over(int64_t C, const MoeConfig& config, const SequenceParts& parts) const;
  // Where each sequence lives: whole, or split over the context-parallel ranks.
  virtual const SequenceParts& sequence_parts() const { return whole_sequences(); }
};

// The serial layers.
const LayerBuilder& serial_layers();

}  // namespace loom::nn
