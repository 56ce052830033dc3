// A device described by measured rates (what `loom plan --cluster local` builds for a CPU):
// each GEMM shape at its own forward and backward rate, attention as one kernel on its
// nominal FLOPs, GELU per value, and ranks taking turns on fewer cores that slow down when
// all are busy; all against hand-computed cases.
#include <gtest/gtest.h>

#include "loom/error.hpp"
#include "loom/plan/gemm_cost.hpp"
#include "loom/plan/layout_cost.hpp"

namespace loom::plan {
namespace {

// A slow roofline device (so an unmeasured shape would stand out) with fp32 values.
ClusterSpec measured_device() {
  ClusterSpec c;
  c.peak_flops = 1e6;
  c.gemm_peak_share = 1.0;
  c.memory_bandwidth = 1e12;  // elementwise bytes cost next to nothing unless asked
  c.compute_units = 0;
  c.precision = Precision::Fp32;
  return c;
}

TEST(PlanMeasuredDevice, GemmAtItsOwnShapesRate) {
  ClusterSpec c = measured_device();
  c.gemm_rates = {{Gemm{8, 4, 2}, 64.0, 32.0}};
  // 2 x 8 x 4 x 2 = 128 FLOPs: forward at 64 FLOP/s, dA + dB (256 FLOPs) at 32 FLOP/s.
  EXPECT_DOUBLE_EQ(gemm_seconds(Gemm{8, 4, 2}, c, 4), 2.0);
  EXPECT_DOUBLE_EQ(gemm_backward_seconds(Gemm{8, 4, 2}, c, 4), 8.0);
  // Another shape falls back to the roofline: 128 FLOPs at the 1e6 peak.
  EXPECT_DOUBLE_EQ(gemm_seconds(Gemm{4, 8, 2}, c, 4), 128.0 / 1e6);
  EXPECT_EQ(find_rate(c.gemm_rates, Gemm{8, 4, 2, 2}), nullptr);  // the batch is part of the shape
}

TEST(PlanMeasuredDevice, LayerFromMeasuredKernels) {
  // L1 h8 a2 s4, one sequence: T = 4 tokens, d = 4.
  const ModelSpec m{"m", 1, 8, 2, 4, 16};
  Layout l;
  l.micro_batch = 1;
  l.recompute = false;
  l.sequence_parallel = false;
  ClusterSpec c = measured_device();
  const LayerGemms g = layer_gemms(m, l);
  EXPECT_EQ(g.linear[0], (Gemm{4, 24, 8}));
  EXPECT_EQ(g.linear[3], (Gemm{4, 8, 32}));
  EXPECT_EQ(g.scores, (Gemm{4, 4, 4, 2}));
  // Linear GEMMs: qkv 1536, proj 512, fc 2048, proj 2048 FLOPs = 6144 forward at 1024 FLOP/s
  // = 6 s; backward twice the FLOPs at 512 = 24 s.
  for (const Gemm& s : g.linear) c.gemm_rates.push_back({s, 1024.0, 512.0});
  // Attention: scores 2 x 4 x 4 x 4 x 2 = 256 FLOPs, forward 2 x 256 at 128 FLOP/s = 4 s,
  // backward 4 x 256 at 64 = 16 s; its softmax is inside the kernel.
  c.attention_rates = {{g.scores, 128.0, 64.0}};
  // GELU on 4 x 32 = 128 values at 0.01 s and 0.02 s a value: 1.28 s and 2.56 s.
  c.gelu_forward_s = 0.01;
  c.gelu_backward_s = 0.02;
  const LayerTime lt = layer_time(m, c, l);
  // LayerNorms and residual adds: 40 h bytes a token, 4 tokens: 1280 bytes, twice backward.
  const double norms = 1280.0 / c.memory_bandwidth;
  EXPECT_DOUBLE_EQ(lt.forward_gemm, 6.0 + 4.0);
  EXPECT_DOUBLE_EQ(lt.backward_gemm, 24.0 + 16.0);
  EXPECT_DOUBLE_EQ(lt.forward_elementwise, norms + 1.28);
  EXPECT_DOUBLE_EQ(lt.backward_elementwise, 2.0 * norms + 2.56);
  // With a slow memory GELU's bytes bound it instead: 32 h / t = 256 bytes a token, 1024 in
  // all, at 100 B/s = 10.24 s against the values' 1.28 s.
  c.memory_bandwidth = 100.0;
  EXPECT_DOUBLE_EQ(layer_time(m, c, l).forward_elementwise, 1280.0 / 100.0 + 10.24);
}

TEST(PlanMeasuredDevice, RanksTakeTurnsOnFewerCores) {
  ClusterSpec c = measured_device();
  c.devices_per_node = 4;
  StepTime dedicated;
  dedicated.compute_s = 1.0;
  dedicated.tp_comm_s = 0.25;
  dedicated.bubble_s = 0.5;  // idle: given up to the other ranks
  dedicated.optimizer_s = 0.25;
  // A core each: no sharing.
  EXPECT_DOUBLE_EQ(core_sharing_seconds(dedicated, 4, c), 0.0);
  // 4 ranks on 2 cores: each busy 1.5 s, 2 turns: 3 s of which the 2 s step already has 2.
  c.cores_per_node = 2;
  EXPECT_DOUBLE_EQ(core_sharing_seconds(dedicated, 4, c), 1.0);
  // 2 ranks on 2 cores: one each.
  EXPECT_DOUBLE_EQ(core_sharing_seconds(dedicated, 2, c), 0.0);
  // 3 ranks: 1.5 turns of 1.5 s = 2.25 s, the step 2 s.
  EXPECT_DOUBLE_EQ(core_sharing_seconds(dedicated, 3, c), 0.25);
  // More ranks than a node holds: only a node's own share its cores.
  EXPECT_DOUBLE_EQ(core_sharing_seconds(dedicated, 16, c), 1.0);
  // Cores at half speed while all are busy: 2 ranks take the dedicated 2 s / 0.5 = 4 s, 4
  // ranks 3 s / 0.5 = 6 s; one rank alone runs at its own speed (here undisturbed).
  c.shared_core_speed = 0.5;
  EXPECT_DOUBLE_EQ(core_sharing_seconds(dedicated, 2, c), 2.0);
  EXPECT_DOUBLE_EQ(core_sharing_seconds(dedicated, 4, c), 4.0);
  EXPECT_DOUBLE_EQ(core_sharing_seconds(dedicated, 1, c), 0.0);
  // Other jobs leave one rank alone 80% of its core: 2 s / 0.8 = 2.5 s.
  c.alone_core_speed = 0.8;
  EXPECT_DOUBLE_EQ(core_sharing_seconds(dedicated, 1, c), 0.5);
  // Communication hidden under compute is no term of the step, but its shared-memory copies
  // are the cores' work: 4 ranks on 2 cores busy 1.5 + 0.5 s each, 2 turns at full speed:
  // 4 s, of which the 2 s step already has 2.
  c.alone_core_speed = c.shared_core_speed = 1.0;
  dedicated.overlapped_comm_s = 0.5;
  EXPECT_DOUBLE_EQ(dedicated.total(), 2.0);
  EXPECT_DOUBLE_EQ(core_sharing_seconds(dedicated, 4, c), 2.0);
  // A core each: the copies run beside the compute, nothing waits.
  EXPECT_DOUBLE_EQ(core_sharing_seconds(dedicated, 2, c), 0.0);
  // Under an emulated network 4x slower than the copy, a quarter of the 0.75 s of
  // communication keeps the core busy: 2 turns of 1.25 + 0.1875 s = 2.875 s.
  c.transfer_core_share = 0.25;
  EXPECT_DOUBLE_EQ(core_sharing_seconds(dedicated, 4, c), 0.875);
}

// `loom plan --net-gbps 10` on a node whose shared memory moves 5 GB/s: the links become 1.25
// GB/s and a quarter of a transfer's time is the cores' copy; a network faster than the node's
// own link changes nothing.
TEST(PlanMeasuredDevice, AnEmulatedNetworkSlowsTheLinksButNotTheCopies) {
  ClusterSpec c = measured_device();
  c.intra_node = c.inter_node = LinkCost{.alpha_s = 2e-6, .beta_s_per_byte = 1.0 / 5e9};
  const ClusterSpec slow = with_emulated_network(c, 10.0);
  EXPECT_DOUBLE_EQ(slow.intra_node.beta_s_per_byte, 1.0 / 1.25e9);
  EXPECT_DOUBLE_EQ(slow.inter_node.beta_s_per_byte, 1.0 / 1.25e9);
  EXPECT_DOUBLE_EQ(slow.intra_node.alpha_s, 2e-6);
  EXPECT_DOUBLE_EQ(slow.transfer_core_share, 0.25);
  const ClusterSpec fast = with_emulated_network(c, 100.0);
  EXPECT_DOUBLE_EQ(fast.intra_node.beta_s_per_byte, c.intra_node.beta_s_per_byte);
  EXPECT_DOUBLE_EQ(fast.transfer_core_share, 1.0);
  EXPECT_THROW(with_emulated_network(c, 0.0), loom::Error);
}

}  // namespace
}  // namespace loom::plan
