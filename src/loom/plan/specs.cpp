#include "loom/plan/specs.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "loom/error.hpp"

namespace loom::plan {

int64_t ModelSpec::parameters() const {
  const int64_t L = layers, h = hidden;
  return 12 * L * h * h + 13 * L * h + vocab * h + seq * h + 2 * h;
}

double ModelSpec::flops_per_sequence(bool recompute) const {
  const double s = static_cast<double>(seq), L = static_cast<double>(layers), h = static_cast<double>(hidden),
               V = static_cast<double>(vocab);
  const double blocks = 72.0 * s * L * h * h * (1.0 + s / (6.0 * h));
  return (recompute ? blocks * 4.0 / 3.0 : blocks) + 6.0 * s * h * V;
}

int64_t value_bytes(Precision p) { return p == Precision::Mixed ? 2 : 4; }  // Loom's activations stay fp32 between layers

int64_t wire_bytes(Precision p) { return p == Precision::Fp32 ? 4 : 2; }

const char* plan_precision_name(Precision p) {
  return p == Precision::Mixed ? "mixed" : p == Precision::Fp32 ? "fp32" : "bf16";
}

Precision parse_plan_precision(const std::string& name) {
  for (Precision p : {Precision::Mixed, Precision::Fp32, Precision::Bf16})
    if (name == plan_precision_name(p)) return p;
  fail("precision must be 'mixed', 'fp32' or 'bf16', got '", name, "'");
}

namespace {

const std::map<std::string, ModelSpec>& models() {
  static const std::map<std::string, ModelSpec> presets = {
      {"gpt2-small", {"gpt2-small", 12, 768, 12, 1024, 50304}},
      {"gpt3-1.3b", {"gpt3-1.3b", 24, 2048, 16, 2048, 51200}},
      {"gpt3-175b", {"gpt3-175b", 96, 12288, 96, 2048, 51200}},
      {"gpt-1t", {"gpt-1t", 128, 25600, 160, 2048, 51200}},
      // Narayanan et al. 2021 (SC21), table 1: the smallest and a large configuration.
      {"sc21-1.7b", {"sc21-1.7b", 24, 2304, 24, 2048, 51200}},
      {"sc21-145b", {"sc21-145b", 80, 12288, 96, 2048, 51200}},
      {"sc21-1t", {"sc21-1t", 128, 25600, 160, 2048, 51200}},
  };
  return presets;
}

const std::map<std::string, ClusterSpec>& clusters() {
  static const std::map<std::string, ClusterSpec> presets = [] {
    std::map<std::string, ClusterSpec> c;
    // DGX A100 nodes of SC21 (NVIDIA A100 datasheet and DGX A100 user guide):
    ClusterSpec a100;
    a100.name = "dgx-a100";
    a100.devices_per_node = 8;
    a100.memory_bytes = int64_t{80} << 30;
    // The CUDA context (~0.5 GiB), NCCL's buffers and cuBLAS workspaces (a few hundred MiB)
    // and allocator fragmentation: our estimate.
    a100.reserved_bytes = int64_t{2} << 30;
    a100.peak_flops = 312e12;  // dense bf16/fp16 tensor-core peak (datasheet)
    // cuBLAS reaches ~80% of that peak on large bf16 GEMMs in isolation; inside a full
    // node's training step clocks sit lower under the 400 W cap. 0.75 is our estimate, the
    // one constant here not read off a datasheet.
    a100.gemm_peak_share = 0.75;
    a100.memory_bandwidth = 0.85 * 2039e9;  // HBM2e 2039 GB/s (datasheet); ~85% streaming
    a100.compute_units = 108;               // SMs (A100 whitepaper)
    a100.tile_m = 256;                      // cuBLAS's largest tensor-core tile (NVIDIA Deep
    a100.tile_n = 128;                      // Learning Performance Guide, "wave quantization")
    // NVSwitch: 600 GB/s per GPU both ways, 300 each way; NCCL all-reduce bus bandwidth on a
    // DGX A100 is ~230 GB/s (nccl-tests), which is 1/beta of the ring model.
    a100.intra_node = {5e-6, 1.0 / 230e9};
    // One 200 Gb/s HDR InfiniBand NIC per GPU: 25 GB/s; ~23 GB/s achieved per NIC.
    a100.inter_node = {10e-6, 1.0 / 23e9};
    c.emplace(a100.name, a100);
    // A 2-core machine like the one Loom is developed on, fp32 oneDNN on one core per rank;
    // `--cluster local` measures the machine it runs on instead (local_cluster.hpp).
    ClusterSpec local;
    local.name = "local-default";
    local.devices_per_node = 2;
    local.cores_per_node = 2;  // more ranks than this take turns
    local.memory_bytes = int64_t{12} << 30;
    local.peak_flops = 100e9;
    local.gemm_peak_share = 1.0;  // the peak is itself a measured GEMM rate
    local.memory_bandwidth = 8e9;
    local.compute_units = 0;
    local.precision = Precision::Fp32;
    local.intra_node = {2e-6, 1.0 / 4e9};
    local.inter_node = local.intra_node;
    c.emplace(local.name, local);
    return c;
  }();
  return presets;
}

template <class Map>
std::vector<std::string> names_of(const Map& m) {
  std::vector<std::string> out;
  for (const auto& [name, spec] : m) out.push_back(name);
  return out;
}

template <class Map>
auto find_preset(const Map& m, const std::string& name, const char* what) {
  auto it = m.find(name);
  if (it == m.end()) {
    std::string known;
    for (const auto& [n, spec] : m) known += (known.empty() ? "" : ", ") + n;
    fail("unknown ", what, " '", name, "'; presets: ", known);
  }
  return it->second;
}

}  // namespace

ModelSpec model_preset(const std::string& name) { return find_preset(models(), name, "model"); }
std::vector<std::string> model_preset_names() { return names_of(models()); }
ClusterSpec cluster_preset(const std::string& name) { return find_preset(clusters(), name, "cluster"); }
std::vector<std::string> cluster_preset_names() { return names_of(clusters()); }

ClusterSpec with_emulated_network(ClusterSpec cluster, double net_gbps) {
  check(std::isfinite(net_gbps) && net_gbps > 0, "an emulated network needs Gbit/s > 0, got ", net_gbps);
  const double emulated_beta = 8.0 / (net_gbps * 1e9);
  const double real_beta = cluster.intra_node.beta_s_per_byte;
  for (LinkCost* link : {&cluster.intra_node, &cluster.inter_node})
    link->beta_s_per_byte = std::max(link->beta_s_per_byte, emulated_beta);
  cluster.transfer_core_share = std::min(1.0, real_beta / emulated_beta);
  return cluster;
}

}  // namespace loom::plan
