// What Plexus-style 3D-parallel GCN training (parallel/graph_3d) moves per epoch along each
// grid axis, as comm::ProcessGroup counts it (an all-reduce: its buffer), and the planner's
// ranking of grids by predicted epoch time, as Plexus's performance model ranks them. Pure
// arithmetic: `loom plan --model gcn` and the accounting test use it alike.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "loom/plan/tensor_parallel_3d_cost.hpp"

namespace loom::plan {

struct GcnShape {
  int64_t N = 1;           // nodes
  int64_t nnz = 0;         // non-zeros of Â (self-loops included)
  int64_t F = 1, H = 16;   // input features, hidden width
  int64_t K = 2, L = 2;    // classes, graph convolutions
  int64_t labelled = 0;    // training nodes (the loss reads their logits)
  bool weight_decay = true;  // the L2 term's ||W0||² sums over the grid each step
  bool bf16 = false;         // mixed precision: the activation sums and the W block move in bf16
};

// One training epoch (forward + backward + loss) of the rank at grid position `at` = {row,
// col, depth} on an R x C x D grid. Per layer l with roles (outer, inner, depth) rotated by
// l % 3 (graph_conv_3d.hpp), this rank's output rows n_d (its part of N over depth), input
// rows n_o (over outer), widths in' and out' (in and out padded as the layer pads them, over
// inner and outer) and its W and b block P = (in' + 1) out' (each depth rank holds 1/depth):
//   forward: all-gather of P over depth (the first layer also of its input block, n_o x in'
//   features in shards of ceil(n_o / depth) rows); all-reduce of Â X over outer (n_d in'), of
//   X W over inner (n_d out'); the loss on the last layer's blocks: per training node among its n_d
//   rows (m of them), the max logit, the sum of exponentials and the target's logit, the
//   predicted class over outer (4 m), the split's labelled count (2: the rank holds its rows'
//   targets only) and the loss and correct count over depth (2);
//   backward: reduce-scatter of dW and db over depth (P); for l > 0 the all-gather of P again,
//   dAGG over outer (n_d in') and dX over depth (n_o in'); the first layer's ||W||² over
//   outer, inner and depth (1 float each). A collective counts its whole buffer (P for the
//   gather and the scatter). An axis of one rank, or an empty buffer, moves nothing. 4 bytes
//   a value; under bf16 (shape.bf16) 2 for the activation sums and W in the gathers of P (b,
//   the features, the gradients and the loss stay fp32).
// labelled_rows: m, the training nodes among the rank's last-layer rows (they depend on the
// node orders); -1: its even share, labelled n_d / N rounded up.
Grid3DBytes gcn_3d_bytes_per_epoch(const GcnShape& shape, int64_t R, int64_t C, int64_t D,
                                   std::array<int64_t, 3> at = {0, 0, 0}, int64_t labelled_rows = -1);

// Bytes rank 0 holds while training on an R x C x D grid (an estimate, as Plexus's
// mem_model.py gives one): the node orders and split (33 bytes a node; no rank holds the
// whole Â), the first layer's shard of the features and its block gathered, each layer's
// blocks of Â and Âᵀ (nnz / (outer x depth) non-zeros) and their nodes' lists, its W and b shards with their gradients and Adam's two moments,
// the block gathered over depth, and the activations backward keeps (Â X and X W + b per
// layer, ReLU/dropout's mask between layers, the loss's copy of its rows' logits); under bf16
// W's shards' bf16 copies, and the gathered W and the kept Â X in bf16.
int64_t gcn_3d_memory_bytes(const GcnShape& shape, int64_t R, int64_t C, int64_t D);

// A grid's predicted epoch: the most any rank sends (bytes over each axis's bandwidth, ring
// all-reduce 2(p-1)/p of the buffer) plus its share of the SpMM and GEMM flops.
struct GcnGridCost {
  int64_t R = 1, C = 1, D = 1;
  double comm_seconds = 0.0, compute_seconds = 0.0;
  Grid3DBytes bytes{};  // rank 0's
  int64_t memory_bytes = 0;  // rank 0's, gcn_3d_memory_bytes
  double seconds() const { return comm_seconds + compute_seconds; }
};
// Every R x C x D = ranks, fastest first. gbps: per-axis link bandwidth (GB/s); gflops: one rank's.
std::vector<GcnGridCost> rank_gcn_grids(const GcnShape& shape, int64_t ranks, double gbps, double gflops);
std::string describe_gcn_plan(const GcnShape& shape, const std::vector<GcnGridCost>& grids, int64_t top);

}  // namespace loom::plan
