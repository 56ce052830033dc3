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
  EXPECT_EQ(error_of([] { model_from_file("/nonexistent/m.toml"); }), "cannot open description file '/nonexistent/m.toml': No such file or directory");
}

// A minimal valid cluster file: its top-level keys, then its two link tables.
const std::string kClusterKeys =
    "devices_per_node = 2\nmemory_gib = 12\npeak_tflops = 0.1\ngemm_peak_share = 1\nmemory_bandwidth_gbs = 8\n";
const std::string kClusterLinks = "[intra_node]\nlatency_us = 2\nbandwidth_gbs = 4\n[inter_node]\nlatency_us = 2\nbandwidth_gbs = 4\n";

TEST(PlanSpecFiles, BadClusterFilesAreNamed) {
  const ClusterSpec c = cluster_from_toml(kClusterKeys + "precision = \"fp32\"\n" + kClusterLinks, "c.toml");
  EXPECT_EQ(c.memory_bytes, int64_t{12} << 30);
  EXPECT_DOUBLE_EQ(c.peak_flops, 0.1e12);
  EXPECT_DOUBLE_EQ(c.intra_node.beta_s_per_byte, 1.0 / 4e9);
  EXPECT_DOUBLE_EQ(c.inter_node.alpha_s, 2e-6);
  EXPECT_EQ(c.precision, Precision::Fp32);
  EXPECT_EQ(error_of([&] { cluster_from_toml(kClusterKeys, "c.toml"); }),
            "c.toml: missing table [intra_node] (latency_us, bandwidth_gbs)");
  EXPECT_EQ(error_of([&] { cluster_from_toml(kClusterKeys + "[intra_node]\nlatency_us = 2\n", "c.toml"); }),
            "c.toml: [intra_node]: missing key 'bandwidth_gbs'");
  EXPECT_EQ(error_of([&] { cluster_from_toml("memory_gib = 12\n" + kClusterLinks, "c.toml"); }),
            "c.toml: missing key 'devices_per_node'");
  EXPECT_EQ(error_of([&] { cluster_from_toml(kClusterKeys + "precision = \"fp8\"\n" + kClusterLinks, "c.toml"); }),
            "c.toml: precision must be \"mixed\", \"fp32\" or \"bf16\", got \"fp8\"");
  EXPECT_EQ(error_of([&] { cluster_from_toml(kClusterKeys + "gemm_peak_share = 2\n" + kClusterLinks, "c.toml"); }).rfind("c.toml:", 0), 0u);
  EXPECT_EQ(error_of([&] { cluster_from_toml(kClusterKeys + "reserved_gib = 12\n" + kClusterLinks, "c.toml"); }),
            "c.toml: reserved_gib (12) must be below memory_gib (12)");
}

// What `loom plan --cluster local --save-cluster` writes reads back as the same cluster, the
// measured kernel rates included, so the planner prices every layout the same from the file.
TEST(PlanSpecFiles, AMeasuredClusterRoundTrips) {
  ClusterSpec c = cluster_preset("local-default");
  c.name = "my \"laptop\"\\ 2";  // quotes and a backslash are escaped on the way out
  c.memory_bytes = 6'123'456'789;
  c.peak_flops = 61.234567e9;
  c.memory_bandwidth = 11.7e9;
  c.alone_core_speed = 0.97;
  c.shared_core_speed = 0.8125;
  c.transfer_core_share = 0.23;
  c.gelu_forward_s = 1.37e-9;
  c.gelu_backward_s = 2.9e-9;
  c.intra_node = {3.1e-6, 1.0 / 5.3e9};
  c.inter_node = {11e-6, 1.0 / 1.2e9};
  c.gemm_rates = {{{1024, 384, 128}, 41.5e9, 38.25e9}, {{1024, 128, 512}, 47.0e9, 44.1e9}};
  c.attention_rates = {{{128, 128, 32, 32}, 9.75e9, 7.5e9}};
  const std::string text = cluster_to_toml(c);
  const ClusterSpec r = cluster_from_toml(text, "saved.toml");
  EXPECT_EQ(r.name, c.name);
  EXPECT_EQ(r.devices_per_node, c.devices_per_node);
  EXPECT_EQ(r.cores_per_node, c.cores_per_node);
  EXPECT_EQ(r.memory_bytes, c.memory_bytes);
  EXPECT_EQ(r.precision, Precision::Fp32);
  for (auto [a, b] : {std::pair{r.peak_flops, c.peak_flops}, {r.gemm_peak_share, c.gemm_peak_share},
                      {r.memory_bandwidth, c.memory_bandwidth}, {r.alone_core_speed, c.alone_core_speed},
                      {r.shared_core_speed, c.shared_core_speed}, {r.transfer_core_share, c.transfer_core_share},
                      {r.gelu_forward_s, c.gelu_forward_s},
                      {r.gelu_backward_s, c.gelu_backward_s}, {r.intra_node.alpha_s, c.intra_node.alpha_s},
                      {r.intra_node.beta_s_per_byte, c.intra_node.beta_s_per_byte},
                      {r.inter_node.alpha_s, c.inter_node.alpha_s},
                      {r.inter_node.beta_s_per_byte, c.inter_node.beta_s_per_byte}})
    EXPECT_NEAR(a, b, 1e-12 * b) << text;
  ASSERT_EQ(r.gemm_rates.size(), 2u);
  ASSERT_EQ(r.attention_rates.size(), 1u);
  EXPECT_EQ(r.gemm_rates[0].shape, c.gemm_rates[0].shape);
  EXPECT_NEAR(r.gemm_rates[0].forward, 41.5e9, 1e-3);
  EXPECT_EQ(r.gemm_rates[1].shape, c.gemm_rates[1].shape);
  EXPECT_NEAR(r.gemm_rates[1].backward, 44.1e9, 1e-3);
  EXPECT_EQ(r.attention_rates[0].shape, c.attention_rates[0].shape);
  EXPECT_NEAR(r.attention_rates[0].forward, 9.75e9, 1e-3);
}

TEST(PlanSpecFiles, BadMeasuredRatesAreNamed) {
  const std::string rate = "[[gemm_rates]]\nm = 128\nn = 64\nk = 32\nforward_gflops = 40\nbackward_gflops = 30\n";
  const ClusterSpec c = cluster_from_toml(kClusterKeys + kClusterLinks + rate + rate, "c.toml");
  ASSERT_EQ(c.gemm_rates.size(), 2u);
  EXPECT_EQ(c.gemm_rates[0].shape, (Gemm{128, 64, 32, 1}));
  EXPECT_DOUBLE_EQ(c.gemm_rates[0].backward, 30e9);
  EXPECT_EQ(error_of([&] { cluster_from_toml(kClusterKeys + kClusterLinks + rate + "[[gemm_rates]]\nm = 128\n", "c.toml"); }),
            "c.toml: [[gemm_rates]] #2: missing key 'n'");
  EXPECT_EQ(error_of([&] { cluster_from_toml(kClusterKeys + "gemm_rates = 3\n" + kClusterLinks, "c.toml"); }),
            "c.toml: gemm_rates must be an array of tables ([[gemm_rates]])");
  EXPECT_EQ(error_of([&] { cluster_from_toml(kClusterKeys + kClusterLinks + "[[attention_rates]]\nm = 1\nn = 1\nk = 1\n"
                                             "forward_gflops = -4\nbackward_gflops = 1\n", "c.toml"); }),
            "c.toml: [[attention_rates]] #1: forward_gflops must be positive, got -4");
  EXPECT_EQ(error_of([&] { cluster_from_toml(kClusterKeys + "shared_core_speed = 1.5\n" + kClusterLinks, "c.toml"); }),
            "c.toml: shared_core_speed must be in (0, 1], got 1.5");
  EXPECT_EQ(error_of([&] { cluster_from_toml(kClusterKeys + "gelu_forward_ns = inf\n" + kClusterLinks, "c.toml"); }),
            "c.toml: gelu_forward_ns must be positive, got inf");
  EXPECT_EQ(error_of([&] { cluster_from_toml(kClusterKeys + kClusterLinks + "[[gemm_rates]]\nm = 9223372036854775807\nn = 1\nk = 1\n"
                                             "forward_gflops = 1\nbackward_gflops = 1\n", "c.toml"); }),
            "c.toml: [[gemm_rates]] #1: m is too large, got 9.22337e+18");
}

}  // namespace
}  // namespace loom::plan
