// Context parallelism's ring attention against the serial causal attention kernel, over a cp
// group of the whole world (cp = 1..8; the brief's cp 2, 3, 4 among them): this rank's chunks
// of the output and of dQ, dK, dV must be the serial kernel's rows at those positions, for
// the zig-zag and the contiguous split, with odd head sizes and odd chunk lengths.
// Tolerance atol 2e-6 / rtol 1e-5: the inputs are O(1), every output element is a sum of at
// most T = 6·cp ≤ 48 products (80·cp ≤ 640 in the head-group case, still O(1) softmax
// averages) whose order (and softmax rescaling) differs from the serial
// kernel's, so rounding stays within a few fp32 ulps of O(1) values (~1e-6); a wrong block,
// a missed rescale or a dK/dV returned to the wrong owner is off by O(0.1).
// Then the activations a layer keeps under cp, against the planner's count; and the split
// itself: zig-zag gives every rank the same causal attention work.
#include <gtest/gtest.h>

#include <algorithm>

#include <string>

#include "comm/mpi_test_env.hpp"
#include "loom/error.hpp"
#include "loom/kernels/attention.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/nn/context.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/parallel/context_parallel/context_parallel_layers.hpp"
#include "loom/parallel/context_parallel/load_balance.hpp"
#include "loom/parallel/context_parallel/ring_attention.hpp"
#include "loom/parallel/tensor_parallel/tensor_parallel_layers.hpp"
#include "loom/plan/memory_model.hpp"
#include "loom/plan/mixed_precision_cost.hpp"
#include "loom/train/parallelize.hpp"
#include "loom/train/trainer.hpp"
#include "test_util.hpp"
#include "tiny_config.hpp"

namespace loom::parallel::cp {
namespace {

using loom::testing::all_close;
using loom::testing::random_vector;
using loom::testing::world;

Tensor random_tensor(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  const std::vector<float> v = random_vector(t.numel(), seed);
  std::copy(v.begin(), v.end(), t.f32());
  return t;
}

struct Geometry {
  int64_t B, Tc, NH, HS;
};

void expect_ring_matches_serial(const Geometry& g, Split split, const std::string& what) {
  const int P = world().size(), r = world().rank();
  const int64_t T = 2 * P * g.Tc, C = g.NH * g.HS;
  // The whole sequence, the same on every rank (same seeds), and the serial kernel's answer.
  const Tensor qkv = random_tensor({g.B, T, 3 * C}, 11), dout = random_tensor({g.B, T, C}, 12);
  Tensor out = Tensor::empty({g.B, T, C}), att = Tensor::empty({g.B, g.NH, T, T});
  kernels::attention_forward(out.f32(), att.f32(), qkv.f32(), g.B, T, C, g.NH);
  Tensor dqkv = Tensor::empty(qkv.shape()), datt = Tensor::empty(att.shape());
  kernels::attention_backward(dqkv.f32(), datt.f32(), dout.f32(), qkv.f32(), att.f32(), g.B, T, C, g.NH);

  RingAttention ring(C, g.NH, world(), split);
  nn::Context ctx;
  const Tensor heads = ring.forward(take_chunks(qkv, r, P, split), ctx);
  const Tensor dlocal = ring.backward(take_chunks(dout, r, P, split), ctx);
  const Tensor want_out = take_chunks(out, r, P, split), want_d = take_chunks(dqkv, r, P, split);
  ASSERT_EQ(heads.shape(), want_out.shape());
  EXPECT_TRUE(all_close(heads.f32(), want_out.f32(), heads.numel(), 1e-5, 2e-6, what + " output"));
  // dq, dk, dv are the three column blocks of dqkv: compare each on its own so a failure names it.
  for (int64_t part = 0; part < 3; ++part) {
    std::vector<float> got, want;
    for (int64_t row = 0; row < g.B * T / P; ++row)
      for (int64_t c = 0; c < C; ++c) {
        got.push_back(dlocal.f32()[row * 3 * C + part * C + c]);
        want.push_back(want_d.f32()[row * 3 * C + part * C + c]);
      }
    EXPECT_TRUE(all_close(got, want, 1e-5, 2e-6, what + " d" + "qkv"[part]));
  }
}

TEST(RingAttention, MatchesTheSerialKernelZigZag) {
  expect_ring_matches_serial({2, 3, 3, 5}, Split::ZigZag, "zigzag, HS 5");
  expect_ring_matches_serial({1, 4, 2, 7}, Split::ZigZag, "zigzag, HS 7");
}

// Long chunks: the score scratch takes the heads in groups (heads_per_group: 6C / Tc = 2 of
// the 3 heads, then 1), each group's views offset to its heads and row statistics.
TEST(RingAttention, HeadGroupsMatchTheSerialKernel) {
  ASSERT_EQ(heads_per_group(40, 15, 3), 2);
  expect_ring_matches_serial({1, 40, 3, 5}, Split::ZigZag, "zigzag, heads in groups of 2 + 1");
}

TEST(RingAttention, ScoreScratchStaysWithinTheRanksQkv) {
  EXPECT_EQ(heads_per_group(4, 16, 2), 2);     // short chunks: every head at once
  EXPECT_EQ(heads_per_group(512, 384, 6), 4);  // gpt-mini's width, T 2048 at cp 2
  EXPECT_EQ(heads_per_group(8192, 384, 6), 1);  // one head at a time past 6C rows
  for (int64_t Tc : {64, 256, 1024, 2304}) {
    if (heads_per_group(Tc, 384, 6) > 1) {
      EXPECT_LE(heads_per_group(Tc, 384, 6) * Tc * Tc, 2 * Tc * 3 * 384) << Tc;
    }
  }
}

TEST(RingAttention, MatchesTheSerialKernelContiguous) {
  expect_ring_matches_serial({2, 3, 3, 5}, Split::Contiguous, "contiguous, HS 5");
}

// The activations one more layer keeps under context parallelism (the world one ring), as
// ActivationMemory measures them under tp: the 3- less the 2-layer model's saved activations
// after forward, against plan::activation_bytes_per_layer within 10% and, in bf16, against
// plan::bf16_activation_bytes_per_layer exactly (ring attention keeps bf16 q, k, v and output,
// the output the very tensor the projection keeps, and an fp32 log-sum-exp: a second copy of
// the output would show); a recomputed block keeps exactly its input, bf16 in bf16.
TEST(ContextParallelMemory, PerLayerMatchesTheFormula) {
  const int64_t P = world().size();
  if (P == 1) GTEST_SKIP() << "needs cp >= 2";
  const int64_t B = 2, T = 16 * P, C = 32, NH = 4;
  const nn::LayerBuilder serial;
  const ContextParallelLayers layers(serial, world(), Split::ZigZag);
  auto per_layer = [&](bool recompute) {
    auto saved_after_forward = [&](int64_t L) {
      nn::GPTConfig config{.block_size = T, .n_layer = L, .n_head = NH, .n_embd = C, .recompute = recompute};
      nn::GPT model(config, 1, layers);
      const Tensor idx = Tensor::zeros({B, T / P}, DType::I32);  // this rank's chunks
      MemoryScope scope(MemoryCategory::Activations);
      const int64_t before = MemoryTracker::instance().current(MemoryCategory::Activations);
      nn::Context ctx;
      const Tensor logits = model.forward(idx, ctx);
      return MemoryTracker::instance().current(MemoryCategory::Activations) - before;
    };
    return saved_after_forward(3) - saved_after_forward(2);
  };
  const std::string what = "cp " + std::to_string(P);
  const int64_t fp32 = plan::activation_bytes_per_layer(B, T, C, NH, 1, false, P);
  EXPECT_NEAR(static_cast<double>(per_layer(false)), static_cast<double>(fp32), 0.10 * static_cast<double>(fp32))
      << what;
  EXPECT_EQ(per_layer(true), 4 * B * (T / P) * C) << "recompute, " << what;
  const kernels::PrecisionScope precision(kernels::Precision::BF16);
  const int64_t bf16 = plan::bf16_activation_bytes_per_layer(B, T, C, NH, 1, false, P);
  EXPECT_EQ(per_layer(false), bf16) << "bf16, " << what;
  EXPECT_EQ(per_layer(true), 2 * B * (T / P) * C) << "bf16 recompute, " << what;
}

TEST(ContextSplit, ZigZagBalancesCausalWorkContiguousDoesNot) {
  for (int cp = 2; cp <= 8; ++cp) {
    const int64_t T = 2 * cp * 64;
    int64_t zz_min = INT64_MAX, zz_max = 0, ct_max = 0, total = 0;
    for (int r = 0; r < cp; ++r) {
      const int64_t zz = causal_pairs(T, r, cp, Split::ZigZag), ct = causal_pairs(T, r, cp, Split::Contiguous);
      zz_min = std::min(zz_min, zz);
      zz_max = std::max(zz_max, zz);
      ct_max = std::max(ct_max, ct);
      total += ct;
    }
    EXPECT_EQ(total, T * (T + 1) / 2) << "every (query, key) pair scored once, cp " << cp;
    EXPECT_LE(static_cast<double>(zz_max - zz_min), 0.01 * static_cast<double>(zz_max)) << "cp " << cp;
    // Contiguous: the last rank's queries see the most keys, about (2cp - 1)/cp times the mean.
    const double imbalance = static_cast<double>(ct_max) / (static_cast<double>(total) / cp);
    EXPECT_NEAR(imbalance, (2.0 * cp - 1.0) / cp, 0.01) << "cp " << cp;
  }
}

TEST(ContextSplit, BadLengthIsAClearError) {
  const std::string e = loom::testing::error_of([] { positions_of(10, 0, 3, Split::ZigZag); });
  EXPECT_NE(e.find("divisible by 6"), std::string::npos) << e;
}

// The world ranks of this rank's group, in group order.
std::vector<int> members(comm::ProcessGroup& g) {
  Tensor in = Tensor::empty({1}), out = Tensor::empty({g.size()});
  in.f32()[0] = static_cast<float>(world().rank());
  g.all_gather(in, out);
  std::vector<int> ranks;
  for (int i = 0; i < g.size(); ++i) ranks.push_back(static_cast<int>(out.f32()[i]));
  return ranks;
}

TEST(ContextParallelLayout, CpIsTheAxisBetweenPpAndTp) {
  // rank = ((d * pp + p) * cp + c) * tp + t: a cp group is the ranks differing in c alone,
  // dp x cp the ranks differing in d or c (d slower).
  const int n = world().size(), r = world().rank();
  for (int tp : {1, 2})
    for (int cp = 2; cp * tp <= n; ++cp) {
      if (n % (cp * tp) != 0) continue;
      train::TrainConfig c = loom::testing::tiny_config();
      c.tp = tp;
      c.cp = cp;
      c.dp = n / (cp * tp);
      auto mesh = train::parallel_mesh(c, world());
      const int t = r % tp, cc = r / tp % cp, d = r / (tp * cp);
      std::vector<int> ring, data_and_context;
      for (int x = 0; x < cp; ++x) ring.push_back((d * cp + x) * tp + t);
      for (int dd = 0; dd < c.dp; ++dd)
        for (int x = 0; x < cp; ++x) data_and_context.push_back((dd * cp + x) * tp + t);
      EXPECT_EQ(members(mesh->group("cp")), ring) << "cp " << cp << " tp " << tp;
      EXPECT_EQ(members(*mesh->make_group({"dp", "cp"})), data_and_context) << "cp " << cp << " tp " << tp;
      EXPECT_EQ(mesh->group("cp").rank(), cc);
    }
}

TEST(ContextParallelLayout, BadBlockSizeIsAnErrorOnEveryRankNotAHang) {
  const int n = world().size();
  if (n < 2) GTEST_SKIP() << "needs cp >= 2";
  train::TrainConfig c = loom::testing::tiny_config();
  c.cp = n;
  c.model.block_size = 2 * n * 4 + 2;  // not divisible by 2 x cp
  const std::string e = loom::testing::error_of([&] { train::Trainer trainer(c, true, &world()); });
  EXPECT_NE(e.find("block_size (" + std::to_string(c.model.block_size) + ") must be divisible by " +
                   std::to_string(2 * n)),
            std::string::npos)
      << e;
  world().barrier();  // every rank got here: none waits in a collective of the refused run
}

TEST(ContextParallelLayout, BadLayoutsAreRefusedNamingTheConflict) {
  train::TrainConfig c = loom::testing::tiny_config();
  c.cp = 2;
  c.tp = 4;
  c.model.n_head = 4;
  c.model.block_size = 12;  // 2 x cp divides it, but each cp rank's 6 tokens do not split over tp 4
  c.sequence_parallel = true;
  EXPECT_NE(loom::testing::error_of([&] { c.validate(); }).find("block_size / cp must be divisible by tp"),
            std::string::npos);
  c.tp = 1;
  c.sequence_parallel = false;
  c.cp_split = "spiral";
  EXPECT_NE(loom::testing::error_of([&] { c.validate(); }).find("cp_split must be 'zigzag' or 'contiguous'"),
            std::string::npos);
}

// A mixture of experts' capacity rebuilds each sequence from its parts' choices and the
// positions they name (nn::SequenceParts): those must be where the layout really puts each
// token (cp's two chunks of the batch, then sequence parallelism's consecutive slice of a cp
// rank's rows), and over cp x tp every position is held once.
TEST(ContextParallelLayout, SequencePartsNameWhereEachRanksTokensStand) {
  const int n = world().size();
  int layouts = 0;
  for (int tp = 1; tp <= n; ++tp)
    for (int cp = 1; cp * tp <= n; ++cp) {
      if (n % (cp * tp) != 0 || cp * tp == 1) continue;
      train::TrainConfig c = loom::testing::tiny_config();
      c.tp = tp;
      c.cp = cp;
      c.dp = n / (cp * tp);
      auto mesh = train::parallel_mesh(c, world());
      comm::ProcessGroup &tensor_group = mesh->group("tp"), &context_group = mesh->group("cp");
      const parallel::tp::TensorParallelLayers tensor(tensor_group, /*sequence_parallel=*/true);
      const int64_t T = 2 * cp * tp * 3, rows = T / (cp * tp);
      Tensor sequence = Tensor::empty({1, T});
      for (int64_t t = 0; t < T; ++t) sequence.f32()[t] = static_cast<float>(t);
      for (const Split split : {Split::ZigZag, Split::Contiguous}) {
        const ContextParallelLayers context(tensor, context_group, split);
        const nn::SequenceParts& parts = cp > 1 ? context.sequence_parts() : tensor.sequence_parts();
        const std::string what = "cp " + std::to_string(cp) + " (" + (split == Split::ZigZag ? "zigzag" : "contiguous") +
                                 ") x tp " + std::to_string(tp);
        ASSERT_EQ(parts.parts(), cp * tp) << what;
        const Tensor mine = take_chunks(sequence, context_group.rank(), cp, split);
        std::vector<int64_t> want;
        for (int64_t i = 0; i < rows; ++i) want.push_back(static_cast<int64_t>(mine.f32()[tensor_group.rank() * rows + i]));
        const std::vector<int64_t> at = parts.positions(rows);
        EXPECT_EQ(at, want) << what;
        std::vector<float> sent(at.begin(), at.end());
        std::vector<float> all = parts.gather(sent);
        std::sort(all.begin(), all.end());
        ASSERT_EQ(static_cast<int64_t>(all.size()), T) << what;
        for (int64_t t = 0; t < T; ++t) ASSERT_EQ(all[static_cast<size_t>(t)], static_cast<float>(t)) << what;
        ++layouts;
      }
    }
  if (layouts == 0) GTEST_SKIP() << "needs 2 ranks";
}

}  // namespace
}  // namespace loom::parallel::cp
