#include "loom/plan/specs.hpp"

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
  const double flops = 72.0 * s * L * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * L * h));
  return recompute ? flops * 4.0 / 3.0 : flops;
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
  };
  return presets;
}

const std::map<std::string, ClusterSpec>& clusters() {
  static const std::map<std::string, ClusterSpec> presets = [] {
    std::map<std::string, ClusterSpec> c;
    // DGX A100 nodes of SC21: 8 x A100 80 GB, 312 TFLOP/s bf16 each; NVSwitch 600 GB/s per GPU
    // (300 GB/s each way); 8 x 200 Gb/s HDR InfiniBand per node (25 GB/s per GPU).
    ClusterSpec a100{"dgx-a100", 8, int64_t{80} << 30, 312e12, 0.55, {5e-6, 1.0 / 300e9}, {10e-6, 1.0 / 25e9}};
    c.emplace(a100.name, a100);
    // This machine: a process per core, 12 GiB each, oneDNN fp32 GEMM ~170 GFLOP/s per core at
    // ~75% in a training step, shared-memory transfers of a few GB/s.
    ClusterSpec local{"local", 2, int64_t{12} << 30, 170e9, 0.75, {2e-6, 1.0 / 4e9}, {2e-6, 1.0 / 4e9}};
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

}  // namespace loom::plan
