// Time of one training step of a layout, term by term: the GEMMs of each layer at their
// shape's efficiency (gemm_cost.hpp), the memory-bound elementwise kernels at the memory
// bandwidth, the tensor-parallel collectives (not overlapped, as in Megatron), the pipeline
// bubble and point-to-point transfers, the data-parallel gradient reduction overlapped with
// the last micro-batch's backward bucket by bucket (gradient_overlap.hpp), the optimizer step,
// and on a CPU the time its ranks lose to sharing cores. Devices measured kernel by kernel (a CPU: specs.hpp) price each GEMM at
// its shape's rate, attention as one kernel and GELU per value. Pure functions.
#pragma once

#include <cstdint>

#include <array>
#include <functional>
#include <vector>

#include "loom/plan/gradient_overlap.hpp"
#include "loom/plan/specs.hpp"

namespace loom::plan {

struct Layout {
  int64_t dp = 1, pp = 1, tp = 1;
  int64_t chunks = 1;       // virtual pipeline stages per rank (interleaved 1F1B when > 1)
  int64_t micro_batch = 1;  // sequences per micro-batch
  int zero = 1;             // ZeRO stage inside dp (the distributed optimizer by default)
  bool recompute = true;    // full activation recompute per layer
  bool sequence_parallel = true;
  // 3D tensor parallelism's grid (tensor_parallel_3d_layout.hpp); all 1: off (tp 1 with it).
  int64_t row = 1, col = 1, depth = 1;
  bool tensor_parallel_3d() const { return row * col * depth > 1; }
  int64_t cp = 1;  // context parallelism: each sequence split over cp ranks (ring attention)
  int64_t ep = 1;  // expert-parallel degree (a split of dp) of a mixture of experts
  int64_t bucket_bytes = int64_t{25} << 20;  // DDP's gradient buckets (train's parallel.bucket_mb)
  // GPipe's schedule (every forward, then every backward: a rank holds all m micro-batches)
  // instead of 1F1B's; the same bubble. The search does not try it: 1F1B holds less.
  bool gpipe = false;
  // Selective recompute (loom train --selective-recompute, Megatron-LM's selective
  // granularity): attention's probabilities are recomputed in backward, not kept. Loom's fp32
  // layer keeps none (and its backward holds two head groups' scores); in mixed precision
  // Korthikanti's layer loses its 5as/h term; backward runs QK^T and the softmax again. Last
  // in the struct: the positional initializers above stay as they are.
  bool selective_recompute = false;
  // ZeRO-3 keeps each gathered unit from its first forward of a step to its last backward
  // (loom train --zero3-reshard step): one gather a step, every unit whole meanwhile.
  bool zero3_reshard_per_step = false;
};

// Whether selective recompute changes anything: Loom's bf16 attention and ring attention
// (cp > 1) keep no probabilities anyway.
bool selective_recompute_matters(const Layout& layout, Precision precision);

// One transformer layer on one device for one micro-batch, seconds.
struct LayerTime {
  double forward_gemm = 0, backward_gemm = 0;        // GEMMs, backward = 2 per forward GEMM
  double forward_elementwise = 0, backward_elementwise = 0;
  double forward_tp = 0, backward_tp = 0;            // tensor-parallel collectives
  double attention_forward = 0, attention_backward = 0;  // attention's share of the above (cp's ring hides under it)
  double forward() const { return forward_gemm + forward_elementwise + forward_tp; }
  double backward() const { return backward_gemm + backward_elementwise + backward_tp; }
};

// Seconds per step by term; the step is their sum.
struct StepTime {
  double compute_s = 0;    // GEMMs and elementwise kernels of the busiest stage (recompute included)
  double tp_comm_s = 0;    // tensor-parallel collectives on the busiest stage
  double bubble_s = 0;     // pipeline fill and drain
  double pp_comm_s = 0;    // point-to-point activations and gradients on the critical path
  double dp_comm_s = 0;    // the exposed part of the gradient reduction, ZeRO-1/2's all-gather and ZeRO-3's gathers
  double optimizer_s = 0;  // Adam over this device's (sharded) parameters
  double sharing_s = 0;    // waiting for a core: more ranks than cores on a node take turns
  double cp_comm_s = 0;    // the exposed part of the context-parallel K/V ring
  double cp_link_s = 0;    // the ring's whole time on the link (not a term: cp_comm_s is its exposed part)
  double ep_comm_s = 0;    // expert parallelism's all-to-alls (moe_cost.hpp)
  // Communication compute hides (not a term): on a CPU node its shared-memory copies are
  // still the cores' work, so the ranks' turns on them count it (core_sharing_seconds).
  double overlapped_comm_s = 0;
  double total() const {
    return compute_s + tp_comm_s + bubble_s + pp_comm_s + dp_comm_s + optimizer_s + sharing_s + cp_comm_s + ep_comm_s;
  }
};

// The GEMMs of one layer for one micro-batch on one device: qkv, attention projection and
// the two MLP products, and attention's two batched per-head products (1D tp, or a 3D grid's
// blocks when layout.tensor_parallel_3d()).
struct LayerGemms {
  std::array<Gemm, 4> linear;
  Gemm scores, context;
};
LayerGemms layer_gemms(const ModelSpec& model, const Layout& layout);
// The LM head's (T, h) x (h, V / t) for one micro-batch (whole under a 3D grid).
Gemm head_gemm(const ModelSpec& model, const Layout& layout);

LayerTime layer_time(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout);

// Seconds of an all-reduce of `bytes` over `ranks` devices, `per_node` of them in each node:
// a ring inside a node; across nodes reduce-scatter inside the node, a ring over the nodes on
// each device's own NIC for its 1/per_node share, all-gather inside the node (NCCL's rings
// over all NICs of a node amount to the same).
double hierarchical_all_reduce_seconds(double bytes, int64_t ranks, int64_t per_node, const ClusterSpec& cluster);

// Seconds a step loses to sharing a CPU node's cores: more ranks than cores take turns, so
// the node's ranks together need `ranks` x the busy time of one over its cores; with every
// core busy each runs at the cluster's shared_core_speed, one rank alone at its
// alone_core_speed. The dedicated step (a core each, undisturbed) already covers part of
// that. 0 on devices of their own (GPUs).
double core_sharing_seconds(const StepTime& dedicated, int64_t ranks, const ClusterSpec& cluster);

// Bytes of the whole tensors one device's ZeRO (stage layout.zero over dp > 1) reduce-scatters
// and all-gathers in a step of `micro_batches`, as comm::CommStats counts them, over the
// parameters it shards: its `params_per_device` (as step_time takes them) and, without expert
// parallelism, its experts (experts_sharded_by_zero; under ep ExpertDataParallel all-reduces
// them instead). Their gradients, `grad_bytes` a value, once (ZeRO-1) or every micro-batch
// (2-3); their values, `gather_bytes` a value, once after the step (1-2), or under ZeRO-3 every
// micro-batch each block before its forward, again before its backward (and before a
// recomputed forward) and the root unit (token and position tables, final LayerNorm) once.
// Units unpadded (ZeRO pads each to a multiple of dp). 0 below ZeRO-1 or at dp 1.
struct ZeroBytes {
  int64_t reduced = 0, gathered = 0;
  int64_t total() const { return reduced + gathered; }
};
ZeroBytes zero_bytes_per_step(const ModelSpec& model, const Layout& layout, int64_t micro_batches,
                              int64_t params_per_device, int64_t grad_bytes, int64_t gather_bytes);

// A step's data-parallel synchronisation over a device's gradients: DDP's buckets (zero 0) or
// ZeRO's reduce-scatters unit by unit (1-2; stage 2 every micro-batch, the earlier ones under
// the later micro-batches' compute) and its gathers of the updated parameters after the step,
// nothing to hide them under; ZeRO-3's reductions and its gathers before each forward and
// backward, prefetched under the compute. `other` are buckets sharing the link (the experts'
// under ep), merged in ready order. The same for a 1D layout and a 3D grid's replicas.
struct DataParallelSync {
  int zero = 0;
  GradientTimeline timeline;       // the last backward: when each gradient is ready
  double bucket_bytes = 0;         // DDP's
  ZeroBytes bytes;                 // ZeRO's (zero_bytes_per_step)
  double micro_batches = 1;
  double gathers = 0;              // ZeRO-3's gathers of all the parameters in a step
  double compute_s = 0;            // the step's compute, which ZeRO-3's traffic hides under
  std::function<double(double bytes)> all_reduce;         // over the gradients' reducers
  std::function<double(double bytes)> gather_all_reduce;  // over the shard group
  std::vector<ReadyReduction> other;
};
struct DataParallelSeconds {
  double comm_s = 0, exposed_s = 0;
};
DataParallelSeconds data_parallel_seconds(const DataParallelSync& sync);

// Whether a layout's data-parallel reduction waits for its pipeline's last backward (the
// trainer's parallel::reduce_during_last_backward): ZeRO-1's, which reduces once after the tied
// table's sum, and DDP's over interleaved chunks; ZeRO-2/3 reduce in every backward.
bool reduces_after_pipeline(int64_t pp, int64_t chunks, int zero);

// A mixture of experts' gradients reduced apart from ZeRO (expert_gradient_bytes_per_step: under
// ep over the expert_dp ranks holding the same experts, without ep and ZeRO over dp), as DDP's
// buckets on a device whose dense gradients follow `timeline`: once a step, each block's ready
// when its MLP's backward ends, about two thirds into the block's (the MLP holds 8 of its 12
// h^2), or all at the end over interleaved chunks (the trainer's experts wait for the pipeline
// then); `per_node` of the dense reducers share a node. Empty when there are none. The
// DataParallelSync's `other`, for a 1D layout and a 3D grid's replicas alike.
std::vector<ReadyReduction> expert_gradient_buckets(const ModelSpec& model, const Layout& layout, const ClusterSpec& cluster,
                                                    const GradientTimeline& timeline, int64_t value_bytes, int64_t per_node);

// The step of `layout` with `micro_batches` micro-batches per pipeline and `params_per_device`
// parameters on each device (before ZeRO sharding), a mixture of experts' routers in place of
// its MLPs and its experts not included (expert_parameters_per_device adds them).
StepTime step_time(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout, int64_t micro_batches,
                   int64_t params_per_device);

}  // namespace loom::plan
