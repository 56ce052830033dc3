// The planner's fp32 case (Loom on a CPU): 4 + 4 + 8 bytes a parameter, Loom's own layer
// activations (memory_model.hpp) and those outside the layers, against a hand-computed case
// and against the memory tracker's peak over a real training step of the serial trainer.
#include <gtest/gtest.h>

#include "loom/plan/layout_cost.hpp"
#include "loom/plan/memory_model.hpp"
#include "loom/plan/rank_memory_terms.hpp"
#include "loom/plan/tensor_parallel_3d_memory.hpp"
#include "loom/train/memory_budget.hpp"
#include "loom/train/trainer.hpp"
#include "serial_layout.hpp"
#include "tiny_config.hpp"

namespace loom::plan {
namespace {

ClusterSpec cpu() {
  ClusterSpec c = cluster_preset("local-default");
  EXPECT_EQ(c.precision, Precision::Fp32);
  return c;
}

TEST(PlanFp32, MemoryOfASerialLayoutByHand) {
  const ModelSpec m{"m", 4, 128, 4, 128, 128};
  Layout l = testing::serial_layout(8);
  const LayoutCost c = predict(m, cpu(), l, 8);
  ASSERT_TRUE(c.valid) << c.why_not;
  const int64_t P = 12 * 4 * 128 * 128 + 13 * 4 * 128 + 128 * 128 + 128 * 128 + 2 * 128;
  EXPECT_EQ(c.state_bytes, 16 * P);
  // The terms a rank's count adds up (a pipeline's or tensor-parallel rank's): per layer
  // 4 (4 BTC + 12 BTC + NH B T^2 + 4 BT) bytes; outside: the final LayerNorm's input, output
  // and statistics (2 BTC + 2 BT) and the logits (BTV, their gradient in place); and the three
  // gradients (3 BTC) the last block's backward, the first, passes on.
  const int64_t B = 8, T = 128, C = 128, NH = 4, V = 128;
  const int64_t layer = 4 * (16 * B * T * C + NH * B * T * T + 4 * B * T);
  const RankShape shape{.batch = B, .seq = T, .hidden = C, .heads = NH, .vocab = V};
  const std::vector<nn::GPTStage> whole{nn::GPTStage{0, 4, true, true}};
  const int64_t sum = rank_activation_bytes(shape, activation_terms(shape), whole, nullptr);
  EXPECT_EQ(sum, 4 * layer + 4 * (2 * B * T * C + 2 * B * T + B * T * V) + 4 * 3 * B * T * C);
  // A whole model on one rank peaks as the 1 x 1 grid counts it, moment by moment: below the sum.
  EXPECT_EQ(c.activation_bytes, grid_3d_activation_bytes({.B = B, .T = T, .C = C, .NH = NH, .L = 4, .V = V}));
  EXPECT_LT(c.activation_bytes, sum);
  // ZeRO-1 over dp 2 shards the 8 bytes of Adam state.
  l.dp = 2;
  l.micro_batch = 4;
  l.zero = 1;
  EXPECT_EQ(predict(m, cpu(), l, 8).state_bytes, 8 * P + 8 * P / 2);
}

// A small model (2 blocks, width 64, 4 heads, T 64, batch 4) at tp 2, as loom train's config and
// as the planner's model and layout.
struct SmallTp2 {
  train::TrainConfig train = testing::tiny_config();
  ModelSpec model{"m", 2, 64, 4, 64, 128};
  Layout layout = testing::serial_layout(4);
  explicit SmallTp2(bool sequence_parallel) {
    train.model.n_layer = 2;
    train.model.n_embd = 64;
    train.model.n_head = 4;
    train.model.block_size = 64;
    train.model.padded_vocab_size = 128;
    train.batch_size = 4;
    train.tp = layout.tp = 2;
    train.sequence_parallel = layout.sequence_parallel = sequence_parallel;
  }
};

// `loom plan --hidden-dropout` prices a layout's activations as `loom train`'s memory check
// counts them with dropout (which the tracker measures exactly: ActivationPeak tests): one more
// fp32 residual-stream tensor in backward's moments, here tp 2 with sequence parallelism.
TEST(PlanFp32, HiddenDropoutPricesWhatTheMemoryCheckCounts) {
  SmallTp2 s(/*sequence_parallel=*/true);
  const LayoutCost plain = predict(s.model, cpu(), s.layout, 4);
  s.train.model.hidden_dropout = s.model.hidden_dropout = 0.1;
  const LayoutCost dropped = predict(s.model, cpu(), s.layout, 4);
  ASSERT_TRUE(dropped.valid) << dropped.why_not;
  EXPECT_EQ(dropped.activation_bytes, static_cast<int64_t>(train::rank_training_memory(s.train, 0).activations));
  EXPECT_GT(dropped.activation_bytes, plain.activation_bytes);
}

// `loom plan --selective-recompute` prices what the memory check counts with it (which the tracker
// measures exactly: ActivationPeak.SelectiveRecompute...): no probabilities kept, two head groups'
// scores in the attention backward; less memory, and a longer backward (QK^T and the softmax again).
TEST(PlanFp32, SelectiveRecomputePricesWhatTheMemoryCheckCounts) {
  SmallTp2 s(/*sequence_parallel=*/false);
  const LayoutCost plain = predict(s.model, cpu(), s.layout, 4);
  s.train.model.selective_recompute = s.layout.selective_recompute = true;
  const LayoutCost selective = predict(s.model, cpu(), s.layout, 4);
  ASSERT_TRUE(selective.valid) << selective.why_not;
  EXPECT_EQ(selective.activation_bytes, static_cast<int64_t>(train::rank_training_memory(s.train, 0).activations));
  EXPECT_LT(selective.activation_bytes, plain.activation_bytes);
  EXPECT_GT(selective.step_s(), plain.step_s());
}

TEST(PlanFp32, PredictsTheTrackedPeakOfASerialStep) {
  train::TrainConfig t = testing::tiny_config();
  t.model.n_embd = 64;
  t.model.n_head = 4;
  t.model.block_size = 64;
  t.batch_size = 4;
  t.steps = 1;
  MemoryTracker& tracker = MemoryTracker::instance();
  const int64_t before = tracker.total_current();
  tracker.reset_peaks();
  train::Trainer trainer(t, true);
  trainer.train_step();
  const int64_t measured = tracker.total_peak() - before;
  // The character vocabulary (65) is padded to 128 rows.
  const ModelSpec m{"m", 2, 64, 4, 64, 128};
  const LayoutCost c = predict(m, cpu(), testing::serial_layout(4), 4);
  EXPECT_NEAR(static_cast<double>(c.memory_bytes()), static_cast<double>(measured), 0.10 * measured)
      << "predicted " << c.memory_bytes() << " measured " << measured;
}

}  // namespace
}  // namespace loom::plan
