// Everything between a step's backwards and its optimizer step, each written once (as
// Megatron-LM's finalize_model_grads): when the data-parallel reduction runs (during the last
// backward, or once after a pipeline's), the sum of the tied token table's two copies over
// the embedding group, the sequence-parallel sums of replicated parameters, and the global
// gradient norm that counts every parameter once across data, tensor and pipeline ranks.
#pragma once

#include <vector>

#include "loom/comm/process_group.hpp"
#include "loom/parallel/gradient_sync.hpp"
#include "loom/parallel/tensor_parallel/sequence_parallel.hpp"

namespace loom::parallel {

struct FinalizeParts {
  GradientSync* sync = nullptr;
  tp::ReplicatedGradientSum* replicated_sum = nullptr;  // sequence parallelism, else null
  tp::ReplicatedGradientSum* context_mean = nullptr;    // context parallelism under ZeRO, else null
  // The pipeline's first and last stage each hold the tied token table; this rank's copy
  // (null where the rank holds neither or the group has one member).
  comm::ProcessGroup* embedding_group = nullptr;
  nn::Parameter* token_table = nullptr;
  // Whether the data-parallel reduction may run during this rank's backwards (DDP's the last,
  // ZeRO-2/3's each), not after them. A
  // pipeline's DDP may (its buckets reduce during each stage's last backward, and the sum of
  // the table's copies commutes with the mean), unless a bucket spans interleaved chunks whose
  // last backwards lie far apart or the sync holds shards that differ between the stages
  // (ZeRO-1's full gradient then reduces once, after the table's sum). ZeRO-2/3 reduce in every
  // backward, the table in a unit of its own whose shards are summed.
  bool reduce_during_backward = true;
  // Groups whose ranks hold different parameters (tp slices, pp stages): the norm sums over them.
  std::vector<comm::ProcessGroup*> model_parallel_groups;
  // Which parameters the norm counts on this rank (a replica across tp counts on tp rank 0
  // only; the last stage's copy of the token table not at all).
  ParameterFilter counted;
};

class GradientFinalizer {
 public:
  explicit GradientFinalizer(FinalizeParts parts) : parts_(std::move(parts)) {}

  // Before each backward: last says it is the step's last micro-batch on this chunk.
  void before_backward(bool last);
  // After the step's last backward: every gradient is its final, averaged value.
  void finish();
  // Collective over the sync's and the model-parallel groups: the whole model's squared norm.
  double grad_sum_squares();

 private:
  FinalizeParts parts_;
};

// The reduce-during-backward rule above, for a sync over a pipeline of `chunks` chunks per rank.
bool reduce_during_last_backward(const GradientSync& sync, bool pipelined, int64_t chunks);

}  // namespace loom::parallel
