// The planner's cost model: per-device memory and time per step of one layout (dp x pp x tp,
// micro-batch size, virtual pipeline chunks, ZeRO stage, recompute, sequence parallelism) for
// a model on a cluster, and the search over layouts (`loom plan`). Mixed precision with Adam
// as in the seeds and Narayanan et al. 2021: bf16 parameters and gradients, fp32 master
// weights and moments (16 bytes per parameter), 2-byte activations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/plan/specs.hpp"

namespace loom::plan {

struct Layout {
  int64_t dp = 1, pp = 1, tp = 1;
  int64_t chunks = 1;       // virtual pipeline stages per rank (interleaved 1F1B when > 1)
  int64_t micro_batch = 1;  // sequences per micro-batch
  int zero = 1;             // ZeRO stage inside dp (the distributed optimizer by default)
  bool recompute = true;    // full activation recompute per layer
  bool sequence_parallel = true;
};

struct LayoutCost {
  Layout layout;
  bool valid = false;
  std::string why_not;  // when not valid: "<kind>: <details>", kind one of heads, layers,
                        // batch, interleaving, out of memory
  int64_t micro_batches = 0;  // per pipeline per step
  // Bytes per device.
  int64_t state_bytes = 0;       // parameters, gradients, optimizer state
  int64_t activation_bytes = 0;  // the most a stage holds (the first stage under 1F1B)
  int64_t memory_bytes() const { return state_bytes + activation_bytes; }
  // Seconds per step.
  double compute_s = 0, bubble_s = 0, tp_comm_s = 0, pp_comm_s = 0, dp_comm_s = 0;
  double step_s() const { return compute_s + bubble_s + tp_comm_s + pp_comm_s + dp_comm_s; }
  double flops_per_device = 0;  // per second, counting recompute as the papers do
};

// Memory and time of one layout for a global batch of sequences.
LayoutCost predict(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout, int64_t global_batch);

// Every layout of `devices` devices (dp x pp x tp = devices, tp within a node and dividing
// the heads, pp dividing the layers, micro-batch sizes 1, 2, 4, 8 dividing the per-replica
// batch, interleaving 1 or 2 chunks, recompute on or off), valid first by predicted step
// time, then the invalid ones with their reason.
std::vector<LayoutCost> search(const ModelSpec& model, const ClusterSpec& cluster, int64_t devices,
                               int64_t global_batch);

}  // namespace loom::plan
