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
// tile_n (128), precision ("mixed" or "fp32", default "mixed"); what `loom plan --cluster
// local` measures on a CPU: cores_per_node, alone_core_speed and shared_core_speed (in
// (0, 1], default 1), gelu_forward_ns and gelu_backward_ns (per value), and arrays of tables
// [[gemm_rates]] and [[attention_rates]] (m, n, k, batch (1), forward_gflops, backward_gflops).
ClusterSpec cluster_from_toml(const std::string& text, const std::string& origin);
ClusterSpec cluster_from_file(const std::string& path);
// The same keys, every field of `c`: what `loom plan --save-cluster` writes, so a machine is
// measured once and planned for again from the file.
std::string cluster_to_toml(const ClusterSpec& c);

}  // namespace loom::plan
