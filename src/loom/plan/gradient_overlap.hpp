// How much of the data-parallel gradient reduction a step waits for, as Loom's data
// parallelism runs it: the last micro-batch's backward produces the gradients layer by layer
// (the LM head and final LayerNorm first, the blocks last to first, the embeddings at the very
// end); a DDP bucket's all-reduce (parallel/ddp.hpp: parameters in reverse registration order,
// a bucket closed before the parameter that would take it past bucket_bytes, a larger
// parameter in a bucket of its own, launched when its last gradient is ready) or a ZeRO unit's
// reduce-scatter (parallel/zero.hpp: one unit per block, the root unit with the embeddings
// when the root's backward ends) starts once it is ready and after the one before it, and what
// runs past the end of backward is exposed. Hiding everything under backward, as the planner
// did before, missed what a small model or a large embedding shows: a model whose gradients
// fill one bucket waits for all of its all-reduce, and the token table's gradient (ready last)
// is never hidden. Pure functions.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace loom::plan {

// A reduction that becomes ready `ready_s` after backward starts and takes `seconds`.
struct ReadyReduction {
  double ready_s = 0, seconds = 0;
};

// Seconds past the end of a backward of `backward_s` until the last of the reductions (in
// launch order, each starting when it is ready and its predecessor is done) finishes; 0 when
// they all finish under it.
double exposed_reduction_seconds(const std::vector<ReadyReduction>& in_launch_order, double backward_s);
// Their seconds on the link, all together.
double total_seconds(const std::vector<ReadyReduction>& reductions);

// One device's parameters, bytes of gradient each, in the order backward readies them, for a
// stage of `layers` blocks: `first_s` of backward before the blocks' (the LM head's on the
// last stage, after which `head` is ready: the final LayerNorm), then each block's `layer`
// over its `layer_s` (a parameter ready when backward has gone through the bytes up to it),
// then the `embedding` (first stage), ready at the end.
struct GradientTimeline {
  double first_s = 0;
  std::vector<double> head;
  int64_t layers = 0;
  double layer_s = 0;
  std::vector<double> layer;
  std::vector<double> embedding;
  double backward_s() const { return first_s + static_cast<double>(layers) * layer_s; }
};

// A transformer block's parameters on one device, bytes of gradient each in the order backward
// readies them (the reverse of registration): the MLP projection's bias and weight, fc's bias
// and weight, ln2, the attention projection's bias and weight, qkv's, ln1; with a tensor-
// parallel split `t` of the weights and the column-parallel biases (the row-parallel biases
// and LayerNorms whole), scaled so that they add up to `block_bytes` (a mixture of experts'
// router in place of the MLP, a 3D grid's blocks).
std::vector<double> block_gradients(int64_t hidden, int64_t t, double block_bytes);

// DDP's buckets of at most `bucket_bytes` (> 0), cut as parallel/ddp.cpp cuts them, each ready
// when its last parameter is. `seconds(bytes)`: one all-reduce.
std::vector<ReadyReduction> ddp_buckets(const GradientTimeline& t, double bucket_bytes,
                                        const std::function<double(double bytes)>& seconds);

// ZeRO's units: each block's gradients reduce-scattered when its backward ends, the root unit
// (the head's and the embeddings' parameters) when the whole backward does. `seconds(bytes)`:
// one reduce-scatter of a unit of that many bytes.
std::vector<ReadyReduction> zero_units(const GradientTimeline& t, const std::function<double(double bytes)>& seconds);

}  // namespace loom::plan
