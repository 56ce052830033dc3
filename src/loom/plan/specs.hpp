// What the planner plans for: a GPT-family model and a cluster, from named presets or given
// field by field. Pure data; the formulas live in layout_cost.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/plan/comm_cost.hpp"

namespace loom::plan {

struct ModelSpec {
  std::string name = "custom";
  int64_t layers = 12;
  int64_t hidden = 768;
  int64_t heads = 12;
  int64_t seq = 1024;
  int64_t vocab = 50304;

  // Parameters: 12 L h^2 + 13 L h (blocks) + V h + s h (embeddings) + 2h (final norm).
  int64_t parameters() const;
  // Training FLOPs of one sequence (Narayanan et al. 2021, eq. 3 per sequence):
  // 72 s L h^2 (1 + s / 6h + V / 12 L h), times 4/3 with full activation recompute.
  double flops_per_sequence(bool recompute) const;
};

struct ClusterSpec {
  std::string name = "custom";
  int64_t devices_per_node = 8;
  int64_t memory_bytes = int64_t{80} << 30;  // per device
  double peak_flops = 312e12;                // per device, in the training precision
  double gemm_efficiency = 0.5;              // share of peak the model's GEMMs reach
  LinkCost intra_node;                       // per device, inside a node
  LinkCost inter_node;                       // per device, between nodes
};

// Presets: gpt2-small, gpt3-1.3b, gpt3-175b, gpt-1t, sc21-1.7b, sc21-145b.
ModelSpec model_preset(const std::string& name);
std::vector<std::string> model_preset_names();
// Presets: dgx-a100 (Narayanan et al. 2021's cluster), local (this 2-core machine, a process
// per core).
ClusterSpec cluster_preset(const std::string& name);
std::vector<std::string> cluster_preset_names();

}  // namespace loom::plan
