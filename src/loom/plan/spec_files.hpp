// Model and cluster descriptions from TOML files (`loom plan --model-file --cluster-file`),
// examples under configs/plan/. Every key is checked: a missing required key, an unknown
// key, a wrong type or a non-positive size is a loom::Error naming the file and the key.
#pragma once

#include <string>

#include "loom/plan/specs.hpp"

namespace loom::plan {

// Keys: layers, hidden, heads, seq, vocab (positive integers, hidden divisible by heads);
// name optional (the file name without extension by default).
ModelSpec model_from_toml(const std::string& text, const std::string& origin);
ModelSpec model_from_file(const std::string& path);

// Keys: devices_per_node, memory_gib, peak_tflops, gemm_peak_share, memory_bandwidth_gbs and
// tables [intra_node] and [inter_node] with latency_us and bandwidth_gbs (per device);
// optional name, reserved_gib (0), compute_units (0: no GEMM waves), tile_m (256),
// tile_n (128), precision ("mixed" or "fp32", default "mixed").
ClusterSpec cluster_from_toml(const std::string& text, const std::string& origin);
ClusterSpec cluster_from_file(const std::string& path);

}  // namespace loom::plan
