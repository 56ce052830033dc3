// ZeRO's units held whole at once (plan/zero_gathered.hpp) against hand counts of the step's
// moments, for four blocks of b elements and a root of r > b (the token table's unit). The
// tracker's peak holds the count to the trainer itself (tests/parallel/test_zero_gathered.cpp).
#include <gtest/gtest.h>

#include "loom/plan/zero_gathered.hpp"

namespace loom::plan {
namespace {

constexpr int64_t b = 100, r = 1000;

ZeroModules four_blocks(bool bf16) {
  const ZeroModule block{{{b, bf16}}}, root{{{r, bf16}}};
  return {{{{block, block, block, block}, root}}};
}

TEST(PlanZeroGathered, Zero3HoldsTheRootTwoBlocksAndThreeBlockGradients) {
  // Block 1's backward: the root, block 1 and the prefetched block 0 gathered (4 bytes an
  // element), the root's and block 1's gradients with blocks 2 and 3's still reduce-scattering.
  EXPECT_EQ(zero_gathered_bytes(four_blocks(false), 1, 3, 1), 4 * (r + 2 * b) + 4 * (r + 3 * b));
  // In bf16 a gathered unit is its bf16 buffer and the fp32 values widened from it; the
  // prefetched one only its bf16 buffer while its gather is in flight.
  EXPECT_EQ(zero_gathered_bytes(four_blocks(true), 1, 3, 1), 6 * (r + b) + 2 * b + 4 * (r + 3 * b));
}

TEST(PlanZeroGathered, ASecondMicroBatchStartsWithTheFirstsLastReductionsInFlight) {
  // Block 3's backward in the second micro-batch: block 0's and the first root gradient still
  // in flight beside the new root gradient and block 3's (r > b: more than block 1's moment).
  EXPECT_EQ(zero_gathered_bytes(four_blocks(false), 1, 3, 2), 4 * (r + 2 * b) + 4 * (2 * r + 2 * b));
  EXPECT_EQ(zero_gathered_bytes(four_blocks(false), 1, 3, 5), zero_gathered_bytes(four_blocks(false), 1, 3, 2));
}

TEST(PlanZeroGathered, Zero3KeptForTheStepHoldsEveryUnitGathered) {
  // zero3_reshard = "step": gathered at the first forward, freed after the last backward. One
  // micro-batch: block 3's backward holds every unit and the root's and block 3's gradients.
  EXPECT_EQ(zero_gathered_bytes(four_blocks(false), 1, 3, 1, nullptr, false), 4 * (r + 4 * b) + 4 * (r + b));
  // Two: the second's block 3 backward, with the first's block 0 and root gradients in flight.
  EXPECT_EQ(zero_gathered_bytes(four_blocks(false), 1, 3, 2, nullptr, false), 4 * (r + 4 * b) + 4 * (2 * r + 2 * b));
}

TEST(PlanZeroGathered, Zero2HoldsOnlyGradientsAndZero1Nothing) {
  EXPECT_EQ(zero_gathered_bytes(four_blocks(true), 1, 2, 1), 4 * (r + 3 * b));
  EXPECT_EQ(zero_gathered_bytes(four_blocks(false), 1, 1, 2), 0);
}

TEST(PlanZeroGathered, EachUnitIsPaddedToAMultipleOfTheShards) {
  // 3 shards: b = 100 -> 102, r = 1000 -> 1002; a router's weight (7 elements, fp32) a unit of its
  // own beside its block's bf16 one, padded apart (7 -> 9).
  EXPECT_EQ(zero_gathered_bytes(four_blocks(false), 3, 3, 1), 4 * (1002 + 2 * 102) + 4 * (1002 + 3 * 102));
  ZeroModules moe = four_blocks(true);
  for (ZeroModule& m : moe.chunks[0].blocks) m.units.push_back({7, false});
  // Block 1's backward: bf16 units 6 + 6 + 2 (prefetched), routers 4 + 4; gradients of the root,
  // block 1's two units and, in flight, the last two units reduce-scattered (block 2's).
  EXPECT_EQ(zero_gathered_bytes(moe, 3, 3, 1), 6 * (1002 + 102) + 2 * 102 + 4 * 2 * 9 + 4 * (1002 + 2 * (102 + 9)));
}

TEST(PlanZeroGathered, APipelinesChunkKeepsItsRootGatheredThroughTheOtherChunksActions) {
  // Interleaved rank 0 of a pipeline: chunk 0 (one block, the token table's root r), chunk 1 (one
  // block, no root), F0 F1 B1 B0. Chunk 0's backward: its root gathered since its forward, its
  // block and the root's and block's fresh gradients, block 1's still reduce-scattering.
  using parallel::pipeline::Action;
  using parallel::pipeline::ActionKind;
  const ZeroModule block{{{b, false}}}, root{{{r, false}}};
  const ZeroModules two_chunks{{{{block}, root}, {{block}, ZeroModule{}}}};
  const std::vector<Action> actions = {{ActionKind::Forward, 0, 0}, {ActionKind::Forward, 0, 1},
                                       {ActionKind::Backward, 0, 1}, {ActionKind::Backward, 0, 0}};
  EXPECT_EQ(zero_gathered_bytes(two_chunks, 1, 3, 1, &actions), 4 * (r + b) + 4 * (r + 2 * b));
  // Stage 2 holds only the gradients: the root's, block 0's and block 1's in flight.
  EXPECT_EQ(zero_gathered_bytes(two_chunks, 1, 2, 1, &actions), 4 * (r + 2 * b));
  // The schedule is walked as given: a second round of both chunks starts with B0's reductions
  // in flight (block 0's and the root's), so B0' holds two of each at once.
  std::vector<Action> two_rounds = actions;
  two_rounds.insert(two_rounds.end(), {{ActionKind::Forward, 1, 0}, {ActionKind::Backward, 1, 0}});
  EXPECT_EQ(zero_gathered_bytes(two_chunks, 1, 2, 2, &two_rounds), 4 * (2 * r + 2 * b));
}

TEST(PlanZeroGathered, ModulesAreTheGptsBlocksAndRoot) {
  // C 32, tp 2, vocab 128, T 16: a block's Linears split (qkv's and fc's biases with them), the
  // LayerNorms and row-parallel biases whole; a mixture of experts (every other block) its router
  // (kept, fp32 under bf16) and, without ep, its 4 experts.
  const int64_t C = 32;
  const RankShape shape{.seq = 16, .hidden = C, .vocab = 128, .tp = 2, .bf16 = true, .experts = 4, .top_k = 2, .every = 2};
  const ZeroModules m = zero_modules(shape, {nn::GPTStage{0, 2, true, true}}, tensor_parallel_linears(C, 2));
  ASSERT_EQ(m.chunks.size(), 1u);
  const ZeroChunkModules& chunk = m.chunks[0];
  ASSERT_EQ(chunk.blocks.size(), 2u);
  const int64_t attention = 4 * C * C / 2 + 3 * C / 2 + C + 4 * C;
  using Units = std::vector<std::pair<int64_t, bool>>;
  auto units = [](const ZeroModule& z) {
    Units out;
    for (const ZeroUnit& u : z.units) out.emplace_back(u.elements, u.bf16);
    return out;
  };
  EXPECT_EQ(units(chunk.blocks[0]), (Units{{attention + 8 * C * C / 2 + 4 * C / 2 + C, true}}));
  EXPECT_EQ(units(chunk.blocks[1]), (Units{{attention + 4 * (8 * C * C + 5 * C), true}, {4 * C, false}}));
  EXPECT_EQ(units(chunk.root), (Units{{128 / 2 * C + 16 * C + 2 * C, true}}));
  RankShape ep = shape;
  ep.ep = 2;
  ep.bf16 = false;
  const ZeroModules under_ep = zero_modules(ep, {nn::GPTStage{0, 2, true, true}}, tensor_parallel_linears(C, 2));
  // The experts outside ZeRO, the router with the rest in one fp32 unit.
  EXPECT_EQ(units(under_ep.chunks[0].blocks[1]), (Units{{attention + 4 * C, false}}));
  // A pipeline's end stages keep the tied table in a unit of its own (summed over both ends).
  const ZeroModules first_stage = zero_modules(shape, {nn::GPTStage{0, 1, true, false}}, tensor_parallel_linears(C, 2));
  EXPECT_EQ(units(first_stage.chunks[0].root), (Units{{16 * C, true}, {128 / 2 * C, true}}));
  const ZeroModules last_stage = zero_modules(shape, {nn::GPTStage{1, 2, false, true}}, tensor_parallel_linears(C, 2));
  EXPECT_EQ(units(last_stage.chunks[0].root), (Units{{2 * C, true}, {128 / 2 * C, true}}));
  const ZeroModules middle = zero_modules(shape, {nn::GPTStage{1, 2, false, false}}, tensor_parallel_linears(C, 2));
  EXPECT_TRUE(middle.chunks[0].root.units.empty());
}

}  // namespace
}  // namespace loom::plan
