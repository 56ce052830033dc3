// Model and cluster TOML files: the committed examples equal the presets, and every kind of
// bad input is a loom::Error naming the file and the key.
#include <gtest/gtest.h>

#include <functional>

#include "loom/error.hpp"
#include "loom/plan/spec_files.hpp"

namespace loom::plan {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(PlanSpecFiles, CommittedExamplesEqualThePresets) {
  for (const char* name : {"sc21-1.7b", "sc21-145b", "sc21-1t"}) {
    const ModelSpec f = model_from_file(std::string(LOOM_SOURCE_DIR "/configs/plan/") + name + ".toml"),
                    p = model_preset(name);
    EXPECT_EQ(f.name, p.name);
    EXPECT_EQ(f.parameters(), p.parameters()) << name;
    EXPECT_EQ(f.heads, p.heads) << name;
    EXPECT_EQ(f.seq, p.seq) << name;
  }
  const ClusterSpec f = cluster_from_file(LOOM_SOURCE_DIR "/configs/plan/dgx-a100.toml"), p = cluster_preset("dgx-a100");
  EXPECT_EQ(f.devices_per_node, p.devices_per_node);
  EXPECT_EQ(f.memory_bytes, p.memory_bytes);
  EXPECT_EQ(f.reserved_bytes, p.reserved_bytes);
  EXPECT_DOUBLE_EQ(f.peak_flops, p.peak_flops);
  EXPECT_DOUBLE_EQ(f.gemm_peak_share, p.gemm_peak_share);
  EXPECT_NEAR(f.memory_bandwidth, p.memory_bandwidth, 1.0);
  EXPECT_EQ(f.compute_units, p.compute_units);
  EXPECT_EQ(f.tile_m, p.tile_m);
  EXPECT_NEAR(f.intra_node.beta_s_per_byte, p.intra_node.beta_s_per_byte, 1e-20);
  EXPECT_NEAR(f.inter_node.alpha_s, p.inter_node.alpha_s, 1e-12);
  EXPECT_EQ(f.precision, Precision::Mixed);
}

TEST(PlanSpecFiles, BadModelFilesAreNamed) {
  const std::string ok = "layers = 2\nhidden = 64\nheads = 4\nseq = 32\nvocab = 65\n";
  EXPECT_EQ(model_from_toml(ok, "m.toml").name, "m");
  EXPECT_EQ(error_of([] { model_from_toml("layers = 2\nhidden = 64\n", "m.toml"); }), "m.toml: missing key 'heads'");
  EXPECT_NE(error_of([&] { model_from_toml(ok + "hiden = 3\n", "m.toml"); })
                .find("m.toml: unknown key 'hiden'; known keys: name, layers"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { model_from_toml("layers = \"two\"\n", "m.toml"); }), "m.toml: layers must be a positive integer");
  EXPECT_EQ(error_of([&] { model_from_toml("layers = 2.5\n", "m.toml"); }), "m.toml: layers must be a positive integer");
  EXPECT_EQ(error_of([&] { model_from_toml("layers = 0\n", "m.toml"); }), "m.toml: layers must be positive, got 0");
  EXPECT_EQ(error_of([] { model_from_toml("layers = 2\nhidden = 64\nheads = 5\nseq = 32\nvocab = 65\n", "m.toml"); }),
            "m.toml: hidden (64) must be divisible by heads (5)");
  EXPECT_EQ(error_of([] { model_from_toml("layers = [\n", "m.toml"); }).rfind("m.toml:", 0), 0u);
  EXPECT_NE(error_of([] { model_from_toml("layers = [\n", "m.toml"); }).find("invalid TOML"), std::string::npos);
  EXPECT_EQ(error_of([] { model_from_file("/nonexistent/m.toml"); }), "cannot open '/nonexistent/m.toml'");
}

TEST(PlanSpecFiles, BadClusterFilesAreNamed) {
  const std::string base =
      "devices_per_node = 2\nmemory_gib = 12\npeak_tflops = 0.1\ngemm_peak_share = 1\nmemory_bandwidth_gbs = 8\n";
  const std::string links = "[intra_node]\nlatency_us = 2\nbandwidth_gbs = 4\n[inter_node]\nlatency_us = 2\nbandwidth_gbs = 4\n";
  const ClusterSpec c = cluster_from_toml(base + "precision = \"fp32\"\n" + links, "c.toml");
  EXPECT_EQ(c.memory_bytes, int64_t{12} << 30);
  EXPECT_DOUBLE_EQ(c.peak_flops, 0.1e12);
  EXPECT_DOUBLE_EQ(c.intra_node.beta_s_per_byte, 1.0 / 4e9);
  EXPECT_DOUBLE_EQ(c.inter_node.alpha_s, 2e-6);
  EXPECT_EQ(c.precision, Precision::Fp32);
  EXPECT_EQ(error_of([&] { cluster_from_toml(base, "c.toml"); }),
            "c.toml: missing table [intra_node] (latency_us, bandwidth_gbs)");
  EXPECT_EQ(error_of([&] { cluster_from_toml(base + "[intra_node]\nlatency_us = 2\n", "c.toml"); }),
            "c.toml: [intra_node]: missing key 'bandwidth_gbs'");
  EXPECT_EQ(error_of([&] { cluster_from_toml("memory_gib = 12\n" + links, "c.toml"); }),
            "c.toml: missing key 'devices_per_node'");
  EXPECT_EQ(error_of([&] { cluster_from_toml(base + "precision = \"fp8\"\n" + links, "c.toml"); }),
            "c.toml: precision must be \"mixed\" or \"fp32\", got \"fp8\"");
  EXPECT_EQ(error_of([&] { cluster_from_toml(base + "gemm_peak_share = 2\n" + links, "c.toml"); }).rfind("c.toml:", 0), 0u);
  EXPECT_EQ(error_of([&] { cluster_from_toml(base + "reserved_gib = 12\n" + links, "c.toml"); }),
            "c.toml: reserved_gib (12) must be below memory_gib (12)");
}

}  // namespace
}  // namespace loom::plan
