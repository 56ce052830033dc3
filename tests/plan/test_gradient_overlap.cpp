// The data-parallel reduction's timeline (plan/gradient_overlap.hpp) against hand-worked
// cases: when reductions start and end, DDP's buckets cut from the gradients in backward's
// order, ZeRO's units, and what the step then prices as exposed.
#include <gtest/gtest.h>

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

// The head's 1 s with its LayerNorm's 10 bytes, 3 blocks of 100 bytes over 2 s each, the
// embeddings' 50 bytes at the end (7 s): buckets of 120 bytes.
GradientTimeline three_blocks(double embedding_bytes) {
  GradientTimeline t;
  t.first_s = 1.0;
  t.head_bytes = 10.0;
  t.layers = 3;
  t.layer_s = 2.0;
  t.layer_bytes = 100.0;
  t.embedding_bytes = embedding_bytes;
  return t;
}

TEST(GradientOverlap, DdpBucketsCloseWhereTheirLastByteIsReady) {
  const std::vector<ReadyReduction> b = ddp_buckets(three_blocks(50.0), 120.0, one_per_100_bytes);
  ASSERT_EQ(b.size(), 3u);
  // 10 + the first block's 100, then the second block's first 10 bytes: that block starts at
  // 3 s and they are ready a tenth into its 2 s.
  EXPECT_DOUBLE_EQ(b[0].ready_s, 3.2);
  EXPECT_DOUBLE_EQ(b[0].seconds, 1.2);
  // 90 more of the second block, 30 of the third (ready 0.6 s into it, which starts at 5 s).
  EXPECT_DOUBLE_EQ(b[1].ready_s, 5.6);
  // The third block's last 70 and the embeddings' 50 fill the last bucket, ready at the end.
  EXPECT_DOUBLE_EQ(b[2].ready_s, 7.0);
  EXPECT_DOUBLE_EQ(b[2].seconds, 1.2);
  // 3.2 + 1.2 = 4.4; 5.6 + 1.2 = 6.8; 7 + 1.2 = 8.2: the last bucket's 1.2 s exposed.
  EXPECT_DOUBLE_EQ(exposed_reduction_seconds(b, three_blocks(50.0).backward_s()), 1.2);
}

TEST(GradientOverlap, ALargeTokenTableIsABucketOfItsOwnReadyLast) {
  const std::vector<ReadyReduction> b = ddp_buckets(three_blocks(500.0), 120.0, one_per_100_bytes);
  ASSERT_EQ(b.size(), 4u);
  // The open bucket (the third block's last 70 bytes) closes when that block ends; the table
  // follows on its own: 7 + 0.7 + 5 = 12.7, 5.7 s past backward.
  EXPECT_DOUBLE_EQ(b[2].ready_s, 7.0);
  EXPECT_DOUBLE_EQ(b[2].seconds, 0.7);
  EXPECT_DOUBLE_EQ(b[3].ready_s, 7.0);
  EXPECT_DOUBLE_EQ(b[3].seconds, 5.0);
  EXPECT_DOUBLE_EQ(exposed_reduction_seconds(b, 7.0), 5.7);
}

TEST(GradientOverlap, OneBucketWaitsForAllOfIt) {
  // A model whose gradients fit one bucket: it is ready at the end, nothing hides.
  const std::vector<ReadyReduction> b = ddp_buckets(three_blocks(50.0), 1e9, one_per_100_bytes);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_DOUBLE_EQ(b[0].ready_s, 7.0);
  EXPECT_DOUBLE_EQ(b[0].seconds, 3.6);  // 10 + 300 + 50 bytes
  EXPECT_DOUBLE_EQ(exposed_reduction_seconds(b, 7.0), 3.6);
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
}

}  // namespace
}  // namespace loom::plan
