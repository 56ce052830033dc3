// What the planner plans for: a GPT-family model and a cluster, from named presets, TOML
// files (spec_files.hpp) or given field by field. Pure data; the formulas live in
// gemm_cost.hpp, step_time.hpp and layout_cost.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/plan/comm_cost.hpp"

namespace loom::plan {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct ModelSpec {
  std::string name = "custom";
  int64_t layers = 12;
  int64_t hidden = 768;
  int64_t heads = 12;
  int64_t seq = 1024;
  int64_t vocab = 50304;
  // Mixture of experts (moe_cost.hpp): experts 0 = a dense model.
  struct Moe {
    int64_t experts = 0, top_k = 2, every = 1;
    double capacity_factor = 0.0;  // f: under ep a rank's expert rows are priced at its bound; 0: dropless, balanced
    // With the experts shared out over ranks (ep, a grid's plane): the busiest rank's routed
    // rows over the mean rank's, each exchange waiting for it (what loom train measures as
    // moe_rank_imbalance); the experts' compute is priced at this multiple. 1: balanced.
    double rank_imbalance = 1.0;
  } moe{};
  // Loom's hidden dropout probability: priced as the memory check counts it (a masked copy of
  // each branch's gradient in backward, rank_memory_terms.hpp); 0: none.
  double hidden_dropout = 0.0;

  // Parameters: 12 L h^2 + 13 L h (blocks) + V h + s h (embeddings) + 2h (final norm).
  int64_t parameters() const;
  // Training FLOPs of one sequence (Narayanan et al. 2021, eq. 3 per sequence): the blocks'
  // 72 s L h^2 (1 + s / 6h), times 4/3 with full activation recompute (one more forward),
  // plus the LM head's 6 s h V, which is never recomputed.
  double flops_per_sequence(bool recompute) const;
};

// What a device trains in. Mixed: 2-byte weights, gradients and activations with fp32 master
// weights and Adam moments (Micikevicius et al. 2018; the seeds' 2 + 2 + 12 bytes). Fp32:
// Loom on a CPU, 4 + 4 + 8 bytes and 4-byte activations. Bf16: Loom on a CPU in mixed
// precision (mixed_precision_cost.hpp): bf16 GEMMs, 2-byte weights and fp32 master weights,
// gradients and moments (18 bytes), Loom's layers keeping bf16 activations for backward.
enum class Precision { Mixed, Fp32, Bf16 };

// C (m, n) = A (m, k) . B (k, n), `batch` independent copies (attention's heads).
struct Gemm {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  double flops() const {
    return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) * static_cast<double>(batch);
  }
  bool operator==(const Gemm&) const = default;
};

// A kernel's measured throughput at one shape, FLOP/s of its forward and of its backward
// (`loom plan --cluster local` times Loom's own kernels at the shapes the model uses).
struct MeasuredRate {
  Gemm shape;
  double forward = 0, backward = 0;
};

struct ClusterSpec {
  std::string name = "custom";
  int64_t devices_per_node = 8;
  int64_t memory_bytes = int64_t{80} << 30;  // per device
  int64_t reserved_bytes = 0;                // per device, not for the model (runtime, buffers)
  double peak_flops = 312e12;                // per device, dense GEMM in the training precision
  double gemm_peak_share = 0.75;             // share of peak a large, well-shaped GEMM sustains
  double memory_bandwidth = 1.7e12;          // bytes/s per device that streaming kernels reach
  int64_t compute_units = 108;               // GEMM tiles run in waves of this many; 0: no waves
  int64_t tile_m = 256, tile_n = 128;        // output tile of one compute unit
  Precision precision = Precision::Mixed;
  LinkCost intra_node;  // per device, inside a node
  LinkCost inter_node;  // per device (its own NIC), between nodes

  // Processors that run a node's devices; fewer than its ranks (a CPU oversubscribed with
  // processes) and they take turns. 0: one each, as a GPU has.
  int64_t cores_per_node = 0;
  // Speed a rank's core gets relative to an undisturbed one, with one core of the node busy
  // and with all of them busy: below 1 where other jobs take a share of the machine and where
  // cores share caches, memory bandwidth, an SMT core or a host that a hypervisor has
  // overcommitted. Measured for `--cluster local` (the kernels' rates above are undisturbed
  // ones); 1 for a GPU.
  double alone_core_speed = 1.0, shared_core_speed = 1.0;
  // Share of a transfer's time on the link that its rank's core spends copying: 1 where the
  // link is the node's shared memory (a CPU copies every byte); below 1 where the link is
  // slower than the copy, as under `loom train --net-gbps` (the rest is a wait that leaves
  // the core to other ranks). Only CPU nodes (cores_per_node > 0) use it.
  double transfer_core_share = 1.0;
  // Measured on the device (local_cluster.hpp); empty or 0 for clusters described by their
  // peak and roofline above, which then price these kernels. On a CPU a small GEMM's rate
  // depends on its shape and on which of the three products it is, far from one peak share:
  std::vector<MeasuredRate> gemm_rates;  // a GEMM by its forward shape; backward: dA and dB together
  // Attention as one kernel (its two batched products and the softmax between them), by
  // the score product's shape {s, s, d, b a / t}, on its nominal 4 b s^2 h / t forward FLOPs.
  std::vector<MeasuredRate> attention_rates;
  // Seconds per value of GELU's forward and backward: on a CPU its exponential, not memory,
  // bounds it.
  double gelu_forward_s = 0, gelu_backward_s = 0;
};

// Bytes of one value of the weights, gradients and activations in the training precision.
int64_t value_bytes(Precision p);
// Bytes of one activation (or activation gradient) value on the wire between devices: the
// tensor-, sequence- and pipeline-parallel, context-parallel ring, expert all-to-all and 3D
// grid traffic. 2 in mixed precision and in Loom's bf16 (which keeps fp32 buffers but moves
// bf16, comm/activation_wire.hpp), 4 in fp32.
int64_t wire_bytes(Precision p);
// "mixed", "fp32", "bf16"; loom::Error naming them otherwise.
const char* plan_precision_name(Precision p);
Precision parse_plan_precision(const std::string& name);

// `cluster` as `loom train --net-gbps G` runs on it: each collective lasts at least its time on a
// G Gbit/s link, sleeping after the real transfer. The links become the slower of the two, and
// transfer_core_share the real (intra-node, shared-memory) link's share of that time.
ClusterSpec with_emulated_network(ClusterSpec cluster, double net_gbps);

// Presets: gpt2-small, gpt3-1.3b, gpt3-175b, gpt-1t, sc21-1.7b, sc21-145b, sc21-1t.
ModelSpec model_preset(const std::string& name);
std::vector<std::string> model_preset_names();
// Presets: dgx-a100 (Narayanan et al. 2021's cluster), local-default (a 2-core machine like
// the one Loom is developed on; `loom plan --cluster local` measures this one instead).
ClusterSpec cluster_preset(const std::string& name);
std::vector<std::string> cluster_preset_names();

}  // namespace loom::plan
