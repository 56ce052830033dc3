// The planner's 3D layouts (tensor_parallel_3d_layout.hpp): the search enumerates exactly the
// grids dp x R x C x D of the devices, names why a grid does not fit, prices a grid with the
// bytes the accounting model counts, and finds the crossover the model predicts: 1D layouts
// win while they divide the work, 3D grids scale past them.
#include <gtest/gtest.h>

#include <array>

#include <set>
#include <tuple>

#include "loom/plan/tensor_parallel_3d_cost.hpp"
#include "loom/plan/tensor_parallel_3d_layout.hpp"
#include "loom/train/memory_budget.hpp"
#include "plan/trainer_config_of.hpp"

namespace loom::plan {
namespace {

Layout grid(int64_t dp, int64_t R, int64_t C, int64_t D, int64_t mb = 1) {
  return Layout{.dp = dp, .micro_batch = mb, .zero = 0, .recompute = false, .sequence_parallel = false, .row = R, .col = C, .depth = D};
}

TEST(Plan3D, TheSearchEnumeratesEveryGridOfTheDevicesOnce) {
  const ModelSpec m = model_preset("gpt2-small");
  const ClusterSpec c = cluster_preset("dgx-a100");
  SearchSpace space;
  space.micro_batches = {1};
  space.recompute = {true};
  space.chunks = {1, 2};
  const std::vector<LayoutCost> all = tensor_parallel_3d_layouts(m, c, 8, 64, space);
  std::set<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>> seen;
  int64_t interleaved = 0;
  for (const LayoutCost& l : all) {
    EXPECT_EQ(l.layout.dp * l.layout.pp * l.layout.row * l.layout.col * l.layout.depth, 8);
    EXPECT_TRUE(l.layout.tensor_parallel_3d());
    if (l.layout.chunks > 1) {
      EXPECT_GT(l.layout.pp, 1);
      ++interleaved;
      continue;
    }
    EXPECT_TRUE(seen.insert({l.layout.dp, l.layout.pp, l.layout.row, l.layout.col, l.layout.depth}).second);
  }
  // Ordered factorisations of 8 = 2^3 into dp x pp x R x C x D (three 2s in five slots:
  // C(7, 3) = 35) minus the 4 with R = C = D = 1 (dp x pp = 8), each once; and each with pp > 1
  // once more over 2 chunks.
  EXPECT_EQ(seen.size(), 31u);
  int64_t pipelined = 0;
  for (const auto& [dp, pp, R, C, D] : seen) pipelined += pp > 1;
  EXPECT_EQ(interleaved, pipelined);
  // None around a ring above: gpt2-small's 1024 tokens are below the space's cp_from_seq. With
  // rings from 1024 tokens, every cp dividing the devices (and 1024 / 2) is tried around grids.
  ASSERT_GT(space.cp_from_seq, m.seq);
  space.cp_from_seq = m.seq;
  std::set<int64_t> rings;
  for (const LayoutCost& l : tensor_parallel_3d_layouts(m, c, 8, 64, space)) {
    EXPECT_EQ(l.layout.dp * l.layout.pp * l.layout.cp * l.layout.row * l.layout.col * l.layout.depth, 8);
    rings.insert(l.layout.cp);
  }
  EXPECT_EQ(rings, (std::set<int64_t>{1, 2, 4}));  // cp 8 leaves no ranks for a grid
  space.cp_from_seq = SearchSpace{}.cp_from_seq;
  // search() merges them with the 1D layouts when asked, and only then.
  space.tensor_parallel_3d = true;
  const std::vector<LayoutCost> ranked = search(m, c, 8, 64, space);
  const BestOfEach best = best_of_each(ranked);
  ASSERT_NE(best.one_d, nullptr);
  ASSERT_NE(best.three_d, nullptr);
  space.tensor_parallel_3d = false;
  EXPECT_EQ(best_of_each(search(m, c, 8, 64, space)).three_d, nullptr);
}

TEST(Plan3D, NamesWhyAGridDoesNotFit) {
  const ModelSpec m{"m", 4, 1024, 16, 512, 51200};
  const ClusterSpec c = cluster_preset("dgx-a100");
  EXPECT_EQ(predict(m, c, grid(1, 3, 1, 1), 8).why_not.rfind("heads:", 0), 0u);
  EXPECT_EQ(predict(m, c, grid(1, 1, 3, 1), 9).why_not.rfind("width:", 0), 0u);
  EXPECT_EQ(predict(m, c, grid(2, 1, 1, 4), 12).why_not.rfind("batch:", 0), 0u);
  EXPECT_TRUE(predict(m, c, grid(2, 1, 1, 4), 16).valid);
}

int64_t both(const std::array<int64_t, 2>& axes) { return axes[0] + axes[1]; }

TEST(Plan3D, PricesTheCountedBytesOnTheirAxes) {
  // Fp32 on a link of 1 GB/s and no latency: row and col cost their counted bytes twice
  // (all-reduces) times (p - 1) / p, 1 ns a byte on axes of 2; what Loom runs under GEMMs
  // hides up to their time (the forward's sums all but their last piece); depth (all-gathers
  // and reduce-scatters, once) hides under the layers' compute up to that compute's time.
  const ModelSpec m{"m", 2, 256, 4, 128, 1024};
  ClusterSpec c = cluster_preset("dgx-a100");
  c.precision = Precision::Fp32;
  c.intra_node = c.inter_node = LinkCost{.alpha_s = 0, .beta_s_per_byte = 1e-9};
  const Gpt3DShape shape{.B = 1, .T = 128, .C = 256, .L = 2, .Vp = 1024, .block_size = 128, .M = 2};
  const LayoutCost flat = predict(m, c, grid(1, 2, 2, 1), 2);
  ASSERT_TRUE(flat.valid) << flat.why_not;
  const Grid3DBytes b = tensor_parallel_3d_bytes_per_step(shape, 2, 2, 1);
  EXPECT_EQ(b.depth, 0);
  const double row_col = 1e-9 * static_cast<double>(b.row + b.col);
  const double waiting = 1e-9 * static_cast<double>(b.row + b.col - both(b.forward_sums) - both(b.under_weight_gradient));
  EXPECT_NEAR(flat.time.tp_comm_s + flat.time.overlapped_comm_s, row_col, 1e-12);
  EXPECT_GE(flat.time.tp_comm_s, waiting + 1e-9 * static_cast<double>(both(b.forward_sums)) / 4.0 - 1e-12);
  EXPECT_LT(flat.time.tp_comm_s, row_col);
  EXPECT_EQ(flat.micro_batches, 2);

  const LayoutCost deep = predict(m, c, grid(1, 2, 2, 2), 4);
  ASSERT_TRUE(deep.valid) << deep.why_not;
  const Grid3DBytes d = tensor_parallel_3d_bytes_per_step(shape, 2, 2, 2);
  const double depth = 1e-9 * 0.5 * static_cast<double>(d.depth);
  EXPECT_NEAR(deep.time.tp_comm_s + deep.time.overlapped_comm_s, 1e-9 * static_cast<double>(d.row + d.col) + depth,
              1e-12);
  // A slower link exposes more than the compute can hide: the layers' compute under depth's
  // traffic, and under row's and col's the linear GEMMs (at most 1.75 times, forward and dW).
  c.intra_node = c.inter_node = LinkCost{.alpha_s = 0, .beta_s_per_byte = 1e-6};
  const LayoutCost slow = predict(m, c, grid(1, 2, 2, 2), 4);
  EXPECT_GT(slow.time.tp_comm_s, 1e-6 * (static_cast<double>(d.row + d.col) + 0.5 * static_cast<double>(d.depth)) -
                                     2.75 * slow.time.compute_s);
}

// What runs under GEMMs, on a grid of col only (1, 2, 1): per layer and micro-batch of N
// rows, the first layers (QKV, fc: input over col) sum their outputs over col in forward (N 3C,
// N 4C) and gather their whole input gradient under the dW GEMM (N C each); the second ones
// (projection, MLP projection: output over col) sum their input gradient under the dW GEMM (N C,
// N 4C) and gather their whole output in forward, waiting (N C each).
TEST(Plan3D, SplitsRowAndColTrafficByWhatRunsUnderGemms) {
  const Gpt3DShape shape{.B = 2, .T = 64, .C = 128, .L = 3, .Vp = 256, .block_size = 64, .M = 2};
  const int64_t per_layer = shape.M * shape.B * shape.T * shape.C * 4;  // N C values, fp32 bytes, all micro-batches
  const Grid3DBytes b = tensor_parallel_3d_bytes_per_step(shape, 1, 2, 1);
  EXPECT_EQ(b.row, 0);
  EXPECT_EQ(b.col, shape.L * 16 * per_layer);
  EXPECT_EQ(b.forward_sums[1], shape.L * 7 * per_layer);
  EXPECT_EQ(b.under_weight_gradient[1], shape.L * 7 * per_layer);
  EXPECT_EQ(b.forward_sums[0] + b.under_weight_gradient[0], 0);
  // On (2, 2, 2) the roles of the axes still add up: nothing is counted hidden twice.
  const Grid3DBytes g = tensor_parallel_3d_bytes_per_step(shape, 2, 2, 2);
  for (int axis : {0, 1})
    EXPECT_LE(g.forward_sums[axis] + g.under_weight_gradient[axis], axis == 0 ? g.row : g.col);
  EXPECT_GT(both(g.forward_sums), 0);
  EXPECT_GT(both(g.under_weight_gradient), 0);
}

// A CPU measured GEMM by GEMM prices a grid's four linear layers at the rates of their
// blocks' shapes ((out / R) x (in / C), a pair's second layer (out / C) x (in / R)): the
// shapes `loom plan --cluster local` measures for it.
TEST(Plan3D, PricesEachBlockAtItsOwnMeasuredRate) {
  const ModelSpec m{"m", 2, 256, 4, 64, 128};
  const Layout l = grid(1, 2, 4, 1, 2);
  const LayerGemms g = layer_gemms(m, l);
  EXPECT_EQ(g.linear[0], (Gemm{128, 3 * 256 / 2, 256 / 4}));
  EXPECT_EQ(g.linear[1], (Gemm{128, 256 / 4, 256 / 2}));
  EXPECT_EQ(g.linear[2], (Gemm{128, 4 * 256 / 2, 256 / 4}));
  EXPECT_EQ(g.linear[3], (Gemm{128, 256 / 4, 4 * 256 / 2}));
  EXPECT_EQ(g.scores.batch, 2 * 4 / 2);  // heads over row
  EXPECT_EQ(head_gemm(m, l), (Gemm{128, 128, 256}));  // the tied head whole on every rank
  ClusterSpec c = cluster_preset("local-default");
  c.precision = Precision::Fp32;
  for (const Gemm& s : g.linear) c.gemm_rates.push_back(MeasuredRate{s, 1e10, 1e10});
  const double before = predict(m, c, l, 2).time.compute_s;
  c.gemm_rates[2].forward = 0.5e10;  // the MLP's first block forward at half the rate
  const double after = predict(m, c, l, 2).time.compute_s;
  // Two layers, one micro-batch: the GEMM's forward time doubles in each.
  EXPECT_NEAR(after - before, 2.0 * (g.linear[2].flops() / 0.5e10 - g.linear[2].flops() / 1e10), 1e-12);
}

// The weight blocks gathered over depth are memory too: with depth > 1 a rank holds its
// layer's block and the two prefetched ones besides the weight-gradient blocks, so a grid
// with depth 2 holds three MLP blocks more than the same grid without depth (whose
// activations are the same: the micro-batch and the row split set them).
TEST(Plan3D, CountsTheGatheredBlocksInMemory) {
  const ModelSpec m{"m", 2, 256, 4, 64, 128};
  const ClusterSpec c = cluster_preset("local-default");
  const LayoutCost flat = predict(m, c, grid(2, 2, 1, 1, 1), 4), deep = predict(m, c, grid(1, 2, 1, 2, 1), 2);
  ASSERT_TRUE(flat.valid && deep.valid) << flat.why_not << deep.why_not;
  EXPECT_EQ(deep.activation_bytes - flat.activation_bytes, int64_t{4} * 3 * 4 * 256 * 256 / 2);
}

// In Loom's precisions a grid's activations are the memory check's for a grid rank
// (train::training_memory, which the trainer's test holds to every grid rank's tracker peak:
// tensor_parallel_3d_memory.hpp), plus the weight blocks gathered over depth, which the check
// does not count (comm buffers, CountsTheGatheredBlocksInMemory): fp32 and bf16, with and
// without full and selective recompute, on grids splitting rows, columns and depth. It once priced them as a 1D
// layer over row with the logits and 3 (B, T, C) tensors: 2,2,1 in fp32 477184 B where the check
// has 419840. Under bf16 the state adds a bf16 copy of what GEMMs read, each weight shard and
// the tied token table, none of the biases, LayerNorms and position table (once 2 B each of
// those too).
TEST(Plan3D, ActivationsAreTheMemoryChecksPlusTheGatheredBlocks) {
  const int64_t L = 2, h = 64, heads = 4, seq = 32, vocab = 128, mb = 2;
  const ModelSpec m{"m", L, h, heads, seq, vocab};
  for (const std::array<int64_t, 3> g : {std::array<int64_t, 3>{2, 2, 1}, {1, 2, 2}, {2, 1, 2}, {2, 2, 2}})
    for (const bool bf16 : {false, true})
      for (const bool recompute : {false, true})
        for (const bool selective : {false, true}) {
          const auto [R, C, D] = g;
          ClusterSpec cluster = cluster_preset("local-default");
          cluster.precision = bf16 ? Precision::Bf16 : Precision::Fp32;
          Layout l = grid(1, R, C, D, mb);
          l.recompute = recompute;
          l.selective_recompute = selective;
          const LayoutCost cost = predict(m, cluster, l, mb * D);
          ASSERT_TRUE(cost.valid) << cost.why_not;
          const train::TrainConfig c = testing::trainer_config_of(m, l, 1, bf16);
          const int64_t gathered = 4 * ((D > 1 ? 3 : 0) + 3) * 4 * h * h / (R * C);
          EXPECT_EQ(static_cast<double>(cost.activation_bytes - gathered), train::training_memory(c).activations)
              << c.tp_3d << (bf16 ? " bf16" : " fp32") << (recompute ? " recompute" : "") << (selective ? " selective" : "");
        }
  ClusterSpec c = cluster_preset("local-default");
  const Layout l = grid(1, 2, 1, 2, 2);
  c.precision = Precision::Fp32;
  const LayoutCost fp32 = predict(m, c, l, 4);
  // Selective recompute in fp32: less memory, and QK^T and the softmax again in backward.
  Layout selective = l;
  selective.selective_recompute = true;
  const LayoutCost recomputed = predict(m, c, selective, 4);
  EXPECT_LT(recomputed.activation_bytes, fp32.activation_bytes);
  EXPECT_GT(recomputed.step_s(), fp32.step_s());
  c.precision = Precision::Bf16;
  const LayoutCost bf16 = predict(m, c, l, 4);
  const int64_t weight_shards = L * 12 * h * h / (2 * 1 * 2), table = vocab * h;
  EXPECT_EQ(bf16.state_bytes - fp32.state_bytes, 2 * (weight_shards + table));
}

// ZeRO over two replicas of a grid (each stage; under a pipeline of grids ZeRO-1, which the
// trainer allows there) is priced as the memory check counts it: the model state of a grid
// rank's shard sharded over dp plus ZeRO's units held whole at once, fp32 and bf16; the
// optimizer steps half the parameters, and ZeRO-1 holds less than DDP.
TEST(Plan3D, ZeroOverGridsIsPricedAsTheMemoryCheckCountsIt) {
  const int64_t L = 4, h = 64, heads = 4, seq = 32, vocab = 128, mb = 2, micro_batches = 2;
  const ModelSpec m{"m", L, h, heads, seq, vocab};
  for (const std::array<int64_t, 3> g : {std::array<int64_t, 3>{2, 1, 1}, {1, 2, 1}, {1, 1, 2}})
    for (const int64_t pp : {1, 2})
      for (const bool bf16 : {false, true}) {
        const auto [R, C, D] = g;
        ClusterSpec cluster = cluster_preset("local-default");
        cluster.precision = bf16 ? Precision::Bf16 : Precision::Fp32;
        const int64_t global_batch = 2 * micro_batches * mb * D;
        Layout ddp = grid(2, R, C, D, mb);
        ddp.pp = pp;
        const LayoutCost unsharded = predict(m, cluster, ddp, global_batch);
        ASSERT_TRUE(unsharded.valid) << unsharded.why_not;
        for (const int zero : {1, 2, 3}) {
          if (pp > 1 && zero > 1) continue;  // a pipeline reduces once, after its last backward
          Layout l = ddp;
          l.zero = zero;
          const LayoutCost cost = predict(m, cluster, l, global_batch);
          ASSERT_TRUE(cost.valid) << cost.why_not;
          const train::TrainConfig c = testing::trainer_config_of(m, l, micro_batches, bf16);
          const std::string what = "dp 2 x pp " + std::to_string(pp) + " x " + c.tp_3d + ", zero " + std::to_string(zero) +
                                   (bf16 ? " bf16" : " fp32");
          const train::MemoryNeed need = train::training_memory(c);
          EXPECT_EQ(need.gathered > 0, zero >= 2) << what;
          EXPECT_EQ(static_cast<double>(cost.state_bytes), need.state + need.gathered) << what;
          EXPECT_DOUBLE_EQ(2.0 * cost.time.optimizer_s, unsharded.time.optimizer_s) << what;
          if (zero == 1) {
            EXPECT_LT(cost.state_bytes, unsharded.state_bytes) << what;
          }
        }
      }
}

// A pipeline of grids (pp 2, each stage a grid over one axis; 1F1B, and interleaved over 2
// chunks), a ring around grids (cp 2) and both are priced as the trainer's memory check counts
// them: the state and the activations of the pipeline rank needing the most (the latter plus
// the gathered weight blocks), fp32 and bf16, with and without recompute; the step has the
// pipeline's bubble and stage sends, the ring's time, which a single grid has not, and a
// stage or a ring rank computes less than the single grid.
TEST(Plan3D, PipelinesAndRingsOfGridsArePricedAsTheMemoryCheckCountsThem) {
  const int64_t L = 4, h = 64, heads = 4, seq = 32, vocab = 128, mb = 2, micro_batches = 4;
  const ModelSpec m{"m", L, h, heads, seq, vocab};
  struct Around {
    int64_t pp, chunks, cp;
  };
  for (const std::array<int64_t, 3> g : {std::array<int64_t, 3>{2, 1, 1}, {1, 2, 1}, {1, 1, 2}})
    for (const Around around : {Around{2, 1, 1}, Around{2, 2, 1}, Around{1, 1, 2}, Around{2, 1, 2}})
      for (const bool bf16 : {false, true})
        for (const bool recompute : {false, true}) {
          const auto [R, C, D] = g;
          ClusterSpec cluster = cluster_preset("local-default");
          cluster.precision = bf16 ? Precision::Bf16 : Precision::Fp32;
          Layout l = grid(1, R, C, D, mb);
          l.pp = around.pp;
          l.chunks = around.chunks;
          l.cp = around.cp;
          l.recompute = recompute;
          const LayoutCost cost = predict(m, cluster, l, micro_batches * mb * D);
          ASSERT_TRUE(cost.valid) << cost.why_not;
          const train::TrainConfig c = testing::trainer_config_of(m, l, micro_batches, bf16);
          const std::string what = "pp " + std::to_string(around.pp) + " (v " + std::to_string(around.chunks) + ") x cp " +
                                   std::to_string(around.cp) + " x " + c.tp_3d + (bf16 ? " bf16" : " fp32") +
                                   (recompute ? " recompute" : "");
          const train::MemoryNeed need = train::training_memory(c);
          const int64_t gathered = 4 * ((D > 1 ? 3 : 0) + 3) * 4 * h * h / (R * C);
          EXPECT_EQ(static_cast<double>(cost.state_bytes), need.state) << what;
          EXPECT_EQ(static_cast<double>(cost.activation_bytes - gathered), need.activations) << what;
          EXPECT_EQ(cost.time.bubble_s > 0.0, around.pp > 1) << what;
          EXPECT_EQ(cost.time.pp_comm_s > 0.0, around.pp > 1) << what;
          EXPECT_EQ(cost.time.cp_comm_s > 0.0, around.cp > 1) << what;
          Layout alone = grid(1, R, C, D, mb);
          alone.recompute = recompute;
          const LayoutCost one = predict(m, cluster, alone, micro_batches * mb * D);
          ASSERT_TRUE(one.valid) << one.why_not;
          EXPECT_EQ(one.time.bubble_s + one.time.pp_comm_s + one.time.cp_comm_s, 0.0);
          EXPECT_LT(cost.time.compute_s, one.time.compute_s) << what << ": a stage runs half the blocks, a ring rank half the tokens";
        }
}

// A mixture of experts on grids (4 experts, top-2, every other block; capacity 1.25) is priced
// as the memory check counts it: each plane rank's E / (row x col) experts in its state (all 4
// on a depth-only grid, and on a plane of 3 that does not divide them), their rows in its
// activations, fp32 and bf16, with and without recompute, alone, with dp 2 under ZeRO-3 and as
// a pipeline of grids, and with ep 2 over dp 2 (each plane rank's block split over ep: one
// expert a rank on a plane of 2, two on a depth-only grid; ZeRO-1 and 3 leave them whole). A plane
// of 2 computes less than a plane of 3 that runs every expert, and the state of a rank of a plane
// of 2 holds 2 experts a block, of a depth-only grid all 4.
TEST(Plan3D, MixtureOfExpertsOnGridsIsPricedAsTheMemoryCheckCountsIt) {
  const int64_t L = 4, h = 48, heads = 6, seq = 32, vocab = 128, mb = 2, micro_batches = 2;
  ModelSpec m{"m", L, h, heads, seq, vocab};
  m.moe = {.experts = 4, .top_k = 2, .every = 2, .capacity_factor = 1.25};
  struct Around {
    int64_t dp, zero, pp, ep = 1;
  };
  for (const std::array<int64_t, 3> g : {std::array<int64_t, 3>{2, 1, 1}, {1, 2, 1}, {1, 1, 2}, {3, 1, 1}})
    for (const Around around : {Around{1, 0, 1}, Around{2, 3, 1}, Around{1, 0, 2}, Around{2, 1, 1, 2}, Around{2, 3, 1, 2}})
      for (const bool bf16 : {false, true})
        for (const bool recompute : {false, true}) {
          const auto [R, C, D] = g;
          if (m.moe.experts % (R * C * around.ep) != 0) continue;  // ep splits each plane rank's block
          ClusterSpec cluster = cluster_preset("local-default");
          cluster.precision = bf16 ? Precision::Bf16 : Precision::Fp32;
          Layout l = grid(around.dp, R, C, D, mb);
          l.zero = around.zero;
          l.pp = around.pp;
          l.ep = around.ep;
          l.recompute = recompute;
          const LayoutCost cost = predict(m, cluster, l, around.dp * micro_batches * mb * D);
          ASSERT_TRUE(cost.valid) << cost.why_not;
          const train::TrainConfig c = testing::trainer_config_of(m, l, micro_batches, bf16);
          const std::string what = "dp " + std::to_string(around.dp) + " zero " + std::to_string(around.zero) + " x pp " +
                                   std::to_string(around.pp) + " x " + c.tp_3d + " ep " + std::to_string(around.ep) +
                                   (bf16 ? " bf16" : " fp32") + (recompute ? " recompute" : "");
          const train::MemoryNeed need = train::training_memory(c);
          // The weight blocks gathered over depth, counted with the activations (as above): the
          // grid's MLP-sized blocks, where the grid splits the layers.
          const bool splits = h % R == 0 && (3 * h) % (3 * R * D) == 0;
          const int64_t gathered = splits ? 4 * ((D > 1 ? 3 : 0) + 3) * 4 * h * h / (R * C) : 0;
          EXPECT_EQ(static_cast<double>(cost.state_bytes), need.state + need.gathered) << what;
          EXPECT_EQ(static_cast<double>(cost.activation_bytes - gathered), need.activations) << what;
        }
  // The plane's gathers and the experts' share, against the same grids without them.
  ClusterSpec cluster = cluster_preset("local-default");
  cluster.precision = Precision::Fp32;
  ModelSpec dense = m;
  dense.moe = {};
  const LayoutCost plane2 = predict(m, cluster, grid(1, 2, 1, 1, mb), micro_batches * mb);
  const LayoutCost plane2_dense = predict(dense, cluster, grid(1, 2, 1, 1, mb), micro_batches * mb);
  const LayoutCost plane3 = predict(m, cluster, grid(1, 3, 1, 1, mb), micro_batches * mb);
  const LayoutCost depth2 = predict(m, cluster, grid(1, 1, 1, 2, mb), 2 * micro_batches * mb);
  const LayoutCost depth2_dense = predict(dense, cluster, grid(1, 1, 1, 2, mb), 2 * micro_batches * mb);
  for (const LayoutCost* k : {&plane2, &plane2_dense, &plane3, &depth2, &depth2_dense}) ASSERT_TRUE(k->valid) << k->why_not;
  EXPECT_LT(plane2.time.compute_s, plane3.time.compute_s) << "3 ranks running every expert";
  // Each of the 2 MoE blocks holds a router (h x 4) and its rank's experts in place of the
  // grid's share of a dense MLP (its weights over row x col x depth, fc's bias over row, the
  // projection's over col), each value at 16 bytes in fp32 (parameter, gradient, AdamW's two).
  const int64_t expert = 8 * h * h + 5 * h;
  EXPECT_EQ(depth2.state_bytes - depth2_dense.state_bytes, 16 * 2 * (4 * expert + 4 * h - (8 * h * h / 2 + 5 * h)))
      << "all 4 experts on a depth-only grid";
  EXPECT_EQ(plane2.state_bytes - plane2_dense.state_bytes, 16 * 2 * (2 * expert + 4 * h - (8 * h * h / 2 + 4 * h / 2 + h)))
      << "2 of the 4 on each rank of a plane of 2";
}

// On a CPU whose ranks take turns on its cores (4 ranks on 2, each core at a tenth of its
// speed alone), the layers' compute lasts 20 times its dedicated time, and the depth traffic
// of a slow link hides under that; with a core per rank at full speed the same traffic
// exceeds the compute and shows.
TEST(Plan3D, DepthTrafficHidesUnderTheComputeAsItRunsOnSharedCores) {
  const ModelSpec m{"m", 2, 256, 4, 64, 128};
  ClusterSpec c = cluster_preset("local-default");
  c.precision = Precision::Fp32;
  c.devices_per_node = 4;
  c.cores_per_node = 4;
  c.alone_core_speed = c.shared_core_speed = 1.0;
  const Layout l = grid(1, 1, 1, 4, 1);
  const LayoutCost alone = predict(m, c, l, 4);
  ASSERT_TRUE(alone.valid) << alone.why_not;
  // A link that moves the depth traffic in 5 times the dedicated compute.
  const Gpt3DShape shape{.B = 1, .T = 64, .C = 256, .L = 2, .Vp = 128, .block_size = 64, .M = 1};
  const double depth_bytes = 0.75 * static_cast<double>(tensor_parallel_3d_bytes_per_step(shape, 1, 1, 4).depth);
  c.intra_node = c.inter_node = LinkCost{.alpha_s = 0, .beta_s_per_byte = 5.0 * alone.time.compute_s / depth_bytes};
  const LayoutCost exposed = predict(m, c, l, 4);
  EXPECT_GT(exposed.time.tp_comm_s, 3.0 * exposed.time.compute_s);  // 5x the link less the layers' compute (< 1x)
  c.cores_per_node = 2;
  c.shared_core_speed = 0.1;
  const LayoutCost shared = predict(m, c, l, 4);
  EXPECT_EQ(shared.time.tp_comm_s, 0.0);  // under 2 turns x 10 = 20x the compute
  EXPECT_EQ(shared.time.compute_s, exposed.time.compute_s);
  // Hidden, the traffic is still the cores' copies: the turns count it (the whole depth link
  // time), so the step is longer than with no traffic at all by 2 turns / 0.1 of it.
  EXPECT_NEAR(shared.time.overlapped_comm_s, 5.0 * alone.time.compute_s, 1e-9 * alone.time.compute_s);
  ClusterSpec no_link = c;
  no_link.intra_node = no_link.inter_node = LinkCost{.alpha_s = 0, .beta_s_per_byte = 0};
  const LayoutCost no_traffic = predict(m, no_link, l, 4);
  EXPECT_NEAR(shared.step_s() - no_traffic.step_s(), 20.0 * shared.time.overlapped_comm_s, 1e-6 * shared.step_s());
}

// On GPUs (no cores shared) hidden depth traffic costs the step nothing.
TEST(Plan3D, HiddenDepthTrafficIsFreeOnGpus) {
  const ModelSpec m{"m", 2, 256, 4, 64, 128};
  ClusterSpec c = cluster_preset("dgx-a100");
  c.precision = Precision::Fp32;
  const Layout l = grid(1, 1, 1, 4, 1);
  c.intra_node = c.inter_node = LinkCost{.alpha_s = 0, .beta_s_per_byte = 0};
  const LayoutCost no_traffic = predict(m, c, l, 4);
  c.intra_node = c.inter_node = LinkCost{.alpha_s = 0, .beta_s_per_byte = 1e-13};
  const LayoutCost fast = predict(m, c, l, 4);
  ASSERT_TRUE(no_traffic.valid && fast.valid) << no_traffic.why_not << fast.why_not;
  EXPECT_GT(fast.time.overlapped_comm_s, 0.0);
  EXPECT_EQ(fast.time.tp_comm_s, 0.0);
  EXPECT_DOUBLE_EQ(fast.step_s(), no_traffic.step_s());
}

TEST(Plan3D, OneDWinsWhileItScalesAndThreeDScalesFurther) {
  // A wide model of 2 layers and a global batch of 8: 1D layouts reach at most dp 8 x pp 2 x
  // tp 8 (tp inside a node) = 128 devices, where the model prices them faster than any 3D
  // grid (Loom's 3D layout replicates the LM head, the embeddings and the LayerNorms on every
  // rank); at 256 devices only 3D grids (depth spanning nodes) still divide the work.
  const ModelSpec m{"wide", 2, 8192, 64, 2048, 51200};
  const ClusterSpec c = cluster_preset("dgx-a100");
  SearchSpace space;
  space.tensor_parallel_3d = true;
  const std::vector<LayoutCost> at128 = search(m, c, 128, 8, space), at256 = search(m, c, 256, 8, space);
  const BestOfEach small = best_of_each(at128), large = best_of_each(at256);
  ASSERT_NE(small.one_d, nullptr);
  ASSERT_NE(small.three_d, nullptr);
  EXPECT_LT(small.one_d->step_s(), small.three_d->step_s());
  EXPECT_EQ(large.one_d, nullptr);
  ASSERT_NE(large.three_d, nullptr);
  EXPECT_LT(large.three_d->step_s(), small.three_d->step_s());  // and it is faster than at 128
}

}  // namespace
}  // namespace loom::plan
