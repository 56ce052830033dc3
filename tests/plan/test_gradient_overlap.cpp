// The data-parallel reduction's timeline (plan/gradient_overlap.hpp) against hand-worked
// cases: when reductions start and end, DDP's buckets cut from the gradients in backward's
// order, ZeRO's units, and what the step then prices as exposed.
#include <gtest/gtest.h>

#include "loom/error.hpp"
#include "loom/plan/gradient_overlap.hpp"
#include "loom/plan/layout_cost.hpp"

namespace loom::plan {
namespace {

double one_per_100_bytes(double bytes) { return bytes / 100.0; }

TEST(GradientOverlap, ExposedIsWhatRunsPastBackward) {
  // Ready early and short: all hidden.
  EXPECT_DOUBLE_EQ(exposed_reduction_seconds({{0.5, 1.0}, {2.0, 1.0}}, 4.0), 0.0);
  // The last one ready when backward ends: all of it exposed.
  EXPECT_DOUBLE_EQ(exposed_reduction_seconds({{1.0, 0.5}, {4.0, 1.5}}, 4.0), 1.5);
  // A backlog: three of 1 s ready at once wait for one another, ending at 1 + 3 = 4, 1 s past 3.
  EXPECT_DOUBLE_EQ(exposed_reduction_seconds({{1.0, 1.0}, {1.0, 1.0}, {1.0, 1.0}}, 3.0), 1.0);
  EXPECT_DOUBLE_EQ(exposed_reduction_seconds({}, 3.0), 0.0);
}

// The head's 1 s with its LayerNorm's 10 bytes, 3 blocks of two parameters (40 then 60
// bytes) over 2 s each, the embeddings' `embedding` bytes at the end (7 s).
GradientTimeline three_blocks(double embedding) {
  GradientTimeline t;
  t.first_s = 1.0;
  t.head = {10.0};
  t.layers = 3;
  t.layer_s = 2.0;
  t.layer = {40.0, 60.0};
  t.embedding = {embedding};
  return t;
}

TEST(GradientOverlap, DdpBucketsAreCutAsLoomCutsThem) {
  // Buckets of 120 bytes closed before the parameter that would overflow them, each ready
  // with its last parameter: 10 + 40 + 60 (the first block's 60 ready when it ends, at 3 s);
  // 40 + 60 (5 s); 40 + 60 (7 s); the embeddings' 50 (7 s).
  const std::vector<ReadyReduction> b = ddp_buckets(three_blocks(50.0), 120.0, one_per_100_bytes);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_DOUBLE_EQ(b[0].ready_s, 3.0);
  EXPECT_DOUBLE_EQ(b[0].seconds, 1.1);
  EXPECT_DOUBLE_EQ(b[1].ready_s, 5.0);
  EXPECT_DOUBLE_EQ(b[2].ready_s, 7.0);
  EXPECT_DOUBLE_EQ(b[3].ready_s, 7.0);
  EXPECT_DOUBLE_EQ(b[3].seconds, 0.5);
  // Done at 4.1, 6, 8, 8.5: 1.5 s past backward's 7.
  EXPECT_DOUBLE_EQ(exposed_reduction_seconds(b, three_blocks(50.0).backward_s()), 1.5);
  // Within a block its parameters are ready in proportion to the bytes backward went through:
  // with 50-byte buckets the first block's 40 bytes close one at 1 + 2 x 0.4 = 1.8 s.
  const std::vector<ReadyReduction> small = ddp_buckets(three_blocks(50.0), 50.0, one_per_100_bytes);
  ASSERT_GE(small.size(), 2u);
  EXPECT_DOUBLE_EQ(small[0].ready_s, 1.8);  // 10 + 40
  EXPECT_DOUBLE_EQ(small[0].seconds, 0.5);
}

TEST(GradientOverlap, AParameterLargerThanABucketHasOneOfItsOwn) {
  // The token table (500 bytes) after the third block's 100: two buckets ready at the end, done
  // at 8 + 1 + 5 = 13 s, 6 s past backward.
  const std::vector<ReadyReduction> b = ddp_buckets(three_blocks(500.0), 120.0, one_per_100_bytes);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_DOUBLE_EQ(b[2].seconds, 1.0);
  EXPECT_DOUBLE_EQ(b[3].ready_s, 7.0);
  EXPECT_DOUBLE_EQ(b[3].seconds, 5.0);
  EXPECT_DOUBLE_EQ(exposed_reduction_seconds(b, 7.0), 6.0);
  // A head parameter of 200 bytes first: a bucket of its own, ready after the head (1 s).
  GradientTimeline t = three_blocks(50.0);
  t.head = {200.0};
  const std::vector<ReadyReduction> head = ddp_buckets(t, 120.0, one_per_100_bytes);
  EXPECT_DOUBLE_EQ(head[0].ready_s, 1.0);
  EXPECT_DOUBLE_EQ(head[0].seconds, 2.0);
}

TEST(GradientOverlap, OneBucketWaitsForAllOfIt) {
  // A model whose gradients fit one bucket: it is ready at the end, nothing hides.
  const std::vector<ReadyReduction> b = ddp_buckets(three_blocks(50.0), 1e9, one_per_100_bytes);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_DOUBLE_EQ(b[0].ready_s, 7.0);
  EXPECT_DOUBLE_EQ(b[0].seconds, 3.6);  // 10 + 300 + 50 bytes
  EXPECT_DOUBLE_EQ(exposed_reduction_seconds(b, 7.0), 3.6);
}

TEST(GradientOverlap, DegenerateTimelines) {
  // No block parameters (all of them outside the blocks) and no backward time in the blocks.
  GradientTimeline t = three_blocks(50.0);
  t.layer = {};
  t.layer_s = 0.0;
  const std::vector<ReadyReduction> b = ddp_buckets(t, 120.0, one_per_100_bytes);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_DOUBLE_EQ(b[0].seconds, 0.6);
  EXPECT_DOUBLE_EQ(exposed_reduction_seconds(b, t.backward_s()), 0.6);
  // A bucket of no bytes is refused by name, not looped on.
  EXPECT_THROW(ddp_buckets(three_blocks(50.0), 0.0, one_per_100_bytes), Error);
  EXPECT_THROW(ddp_buckets(three_blocks(50.0), -1.0, one_per_100_bytes), Error);
}

TEST(GradientOverlap, ZeroUnitsAreTheBlocksThenTheRoot) {
  const std::vector<ReadyReduction> u = zero_units(three_blocks(50.0), one_per_100_bytes);
  ASSERT_EQ(u.size(), 4u);
  EXPECT_DOUBLE_EQ(u[0].ready_s, 3.0);
  EXPECT_DOUBLE_EQ(u[2].ready_s, 7.0);
  EXPECT_DOUBLE_EQ(u[2].seconds, 1.0);
  EXPECT_DOUBLE_EQ(u[3].ready_s, 7.0);  // the root unit: the embeddings and the final LayerNorm
  EXPECT_DOUBLE_EQ(u[3].seconds, 0.6);
  // Blocks end at 3, 5, 7, each reduced in 1 s; the root follows at 8 + 0.6.
  EXPECT_DOUBLE_EQ(exposed_reduction_seconds(u, 7.0), 1.6);
}

// In the step, on the GPU preset (bf16 gradients): a 0.5B model's 1 GB of gradients in one
// bucket waits for its whole all-reduce; in 25 MiB buckets all but the last few hide under
// backward, the token table's bucket (ready last) never does; ZeRO-1 adds its all-gather after
// the step to the root unit's reduce-scatter.
TEST(GradientOverlap, TheStepPricesTheExposedReduction) {
  const ModelSpec m{"half-billion", 8, 2048, 16, 1024, 51200};
  const ClusterSpec c = cluster_preset("dgx-a100");
  Layout l;
  l.dp = 8;
  l.zero = 0;
  l.micro_batch = 4;
  l.recompute = false;
  l.sequence_parallel = false;
  const int64_t params = m.parameters();
  auto all_reduce = [&](double bytes) { return hierarchical_all_reduce_seconds(bytes, 8, 8, c); };
  l.bucket_bytes = int64_t{1} << 40;
  const StepTime one_bucket = step_time(m, c, l, 1, params);
  EXPECT_NEAR(one_bucket.dp_comm_s, all_reduce(static_cast<double>(params * 2)), 1e-9);
  EXPECT_NEAR(one_bucket.overlapped_comm_s, 0.0, 1e-12);
  l.bucket_bytes = int64_t{25} << 20;
  const StepTime buckets = step_time(m, c, l, 1, params);
  const double table = all_reduce(static_cast<double>((m.vocab + m.seq) * m.hidden * 2));
  EXPECT_GE(buckets.dp_comm_s, table);
  EXPECT_LT(buckets.dp_comm_s, 1.5 * table);
  EXPECT_GT(buckets.overlapped_comm_s, 0.5 * one_bucket.dp_comm_s);
  l.zero = 1;
  const StepTime zero1 = step_time(m, c, l, 1, params);
  EXPECT_GE(zero1.dp_comm_s, 0.5 * all_reduce(static_cast<double>(params * 2)) + 0.5 * table);
  // ZeRO-2 reduce-scatters every micro-batch (4 here): the earlier three hide, the last is
  // exposed as ZeRO-1's; ZeRO-1 reduces once.
  const StepTime zero1_mb4 = step_time(m, c, l, 4, params);
  l.zero = 2;
  const StepTime zero2_mb4 = step_time(m, c, l, 4, params);
  EXPECT_NEAR(zero2_mb4.dp_comm_s, zero1_mb4.dp_comm_s, 1e-12);
  EXPECT_GT(zero2_mb4.overlapped_comm_s, zero1_mb4.overlapped_comm_s + 2.5 * 0.5 * all_reduce(static_cast<double>(params * 2)) * 0.9);
  // Under a pipeline ZeRO reduces after the last backward: nothing hides.
  l.zero = 1;
  l.pp = 2;
  const StepTime piped = step_time(m, c, l, 4, params);
  EXPECT_NEAR(piped.overlapped_comm_s, 0.0, 1e-12);
  EXPECT_GT(piped.dp_comm_s, 0.0);
  // Context parallelism under ZeRO: the mean over cp runs first, in the gradients' hooks.
  l.pp = 1;
  l.cp = 2;
  const StepTime with_cp = step_time(m, c, l, 1, params);
  EXPECT_GE(with_cp.dp_comm_s - zero1.dp_comm_s,
            0.99 * hierarchical_all_reduce_seconds(static_cast<double>(params * 2), 2, 2, c));
}

}  // namespace
}  // namespace loom::plan
