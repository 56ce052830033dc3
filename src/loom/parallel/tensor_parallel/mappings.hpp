// The conjugate operators of Megatron-style tensor parallelism (Shoeybi et al. 2019, fig. 3),
// the only places a tensor-parallel layer communicates:
//   f: before a column-parallel layer; identity forward, all-reduce of the input gradient
//      in backward (each rank's gradient is partial: it saw only its output features);
//   g: after a row-parallel layer; all-reduce of the partial outputs in forward, identity
//      backward.
// Sums run in rank order on every rank, so the replicas stay bit-identical. They move
// activations, in the group's activation dtype (comm/activation_wire.hpp: bf16 in a bf16 run).
// Sequence parallelism (Korthikanti et al. 2022) splits the activations outside those
// regions (LayerNorm, residual) along the sequence: f becomes an all-gather along the
// sequence (backward: reduce-scatter) and g a reduce-scatter (backward: all-gather).
#pragma once

#include "loom/comm/process_group.hpp"
#include "loom/nn/shard_spec.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom::parallel::tp {

// f's backward: dx becomes the sum of the group's partial input gradients.
void f_backward(Tensor& dx, comm::ProcessGroup& group);
// The same started now (the group's communication thread runs it while the caller computes):
// dx is the sum once the returned work is waited for.
comm::Work start_f_backward(Tensor& dx, comm::ProcessGroup& group);
// g's forward: y becomes the sum of the group's partial outputs.
void g_forward(Tensor& y, comm::ProcessGroup& group);

// local (B, T/t, C) -> (B, T, C): the group's sequence chunks in rank order.
Tensor gather_sequence(const Tensor& local, comm::ProcessGroup& group);
// full (B, T, C), partial on every rank -> (B, T/t, C): this rank's chunk of the sum.
Tensor reduce_scatter_sequence(const Tensor& full, comm::ProcessGroup& group);

// gather_sequence started now: the group's communication thread gathers while the caller
// computes (the overlap of tp_overlap); blocks() and whole() wait for it. A bf16 local (a
// Linear's kept input in a bf16 run) is gathered as it is, and the result is bf16 too.
class SequenceGather {
 public:
  SequenceGather(const Tensor& local, comm::ProcessGroup& group);
  void wait() const { work_.wait(); }
  // The ranks' chunks rank-major, (t, B, T/t, C): chunk r starts at element r x local.numel().
  const Tensor& blocks() const;
  Tensor whole() const;  // (B, T, C), gather_sequence's result

 private:
  Tensor local_, blocks_;
  int t_;
  comm::Work work_;
};

// reduce_scatter_sequence started now; result() waits for it.
class SequenceReduceScatter {
 public:
  SequenceReduceScatter(const Tensor& full, comm::ProcessGroup& group);
  Tensor result() const;

 private:
  Tensor blocks_, local_;
  comm::Work work_;
};

// The reduce-scatter both of the above reduce with: blocks (t x out.numel(), rank-major
// partial results, block r destined to rank r) -> out, this rank's block summed over the group.
comm::Work start_reduce_scatter_blocks(const Tensor& blocks, Tensor& out, comm::ProcessGroup& group);
// Rank-major blocks (t, B, T/t, C) -> (B, T, C), the sequence order, and back (either dtype).
Tensor sequence_from_blocks(const Tensor& blocks, int64_t B, int64_t Tl, int64_t C, int t);
Tensor blocks_from_sequence(const Tensor& full, int t);

// Features (last dim, in `blocks` blocks each split t ways): (..., F/t) on every rank ->
// (..., F) in the serial order, and back to this rank's slice. in_fp32: gathered in fp32
// whatever the activation dtype (the vocabulary's logits, handed to a sampler as computed).
Tensor gather_features(const Tensor& local, int64_t blocks, comm::ProcessGroup& group, bool in_fp32 = false);
Tensor slice_features(const Tensor& full, int64_t blocks, comm::ProcessGroup& group);
// The whole features from `all` (t x local.numel(), every rank's slice in rank order, as an
// all-gather leaves them): what gather_features returns, for a gather the caller ran itself.
Tensor features_from_gathered(const Tensor& all, const Tensor& local, int64_t blocks, const comm::ProcessGroup& group);

}  // namespace loom::parallel::tp
