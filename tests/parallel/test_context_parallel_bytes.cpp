// Context parallelism's ring, measured: the bytes one rank sends around the K/V ring in a
// training step (the ring's own counter) equal plan::ring_bytes_per_step, for cp = the world
// and, on 4 ranks, cp 2 x tp 2 (K/V split over tp), with two micro-batches and with
// recompute (the forward's ring runs again), and in bf16 (K/V and dK/dV cross at 2 bytes a
// value, comm/activation_wire.hpp). The planner prices `loom plan`'s cp axis with it.
#include <gtest/gtest.h>

#include <string>

#include "comm/mpi_test_env.hpp"
#include "loom/plan/context_parallel_cost.hpp"
#include "loom/train/trainer.hpp"
#include "parallel/equivalence.hpp"

namespace loom::parallel::cp {
namespace {

using loom::testing::world;
using namespace loom::testing::equivalence;

struct RingBytesCase {
  int64_t cp, tp = 1, micro_batches = 1;
  bool recompute = false;
  bool bf16 = false;
};

void PrintTo(const RingBytesCase& c, std::ostream* os) {
  *os << "cp" << c.cp << " tp" << c.tp << " m" << c.micro_batches << (c.recompute ? " recompute" : "")
      << (c.bf16 ? " bf16" : "");
}

class RingBytes : public ::testing::TestWithParam<RingBytesCase> {};

TEST_P(RingBytes, MeasuredRingBytesEqualThePlannersFormula) {
  const RingBytesCase k = GetParam();
  if (world().size() != k.cp * k.tp) GTEST_SKIP() << "a layout of " << k.cp * k.tp << " ranks";
  train::TrainConfig c = tiny(1, 2, k.micro_batches);
  c.cp = k.cp;
  c.tp = k.tp;
  c.model.block_size = 24;  // divisible by 2 x cp for cp 2, 3 and 4
  c.model.recompute = k.recompute;
  if (k.bf16) c.precision = "bf16";
  train::Trainer t(c, true, &world());
  ASSERT_NE(t.parallelized().cp_layers, nullptr);
  t.parallelized().group("cp").reset_stats();
  t.train_step();  // train_step resets the ring's counters first
  const plan::RingShape shape{.B = c.batch_size,  // sequences per micro-batch
                              .T = c.model.block_size,
                              .C = c.model.n_embd,
                              .L = c.model.n_layer,
                              .M = c.micro_batches,
                              .tp = c.tp,
                              .recompute = k.recompute,
                              .value_bytes = k.bf16 ? 2 : 4};
  EXPECT_EQ(t.parallelized().cp_layers->stats().bytes_sent, plan::ring_bytes_per_step(shape, k.cp));
  EXPECT_GT(plan::ring_bytes_per_step(shape, k.cp), 0);
  // The group's own count of what its sends put on the wire says the same.
  EXPECT_EQ(t.parallelized().group("cp").stats().sent_bytes, plan::ring_bytes_per_step(shape, k.cp));
}

INSTANTIATE_TEST_SUITE_P(Layouts, RingBytes,
                         ::testing::Values(RingBytesCase{.cp = 2}, RingBytesCase{.cp = 3, .micro_batches = 2},
                                           RingBytesCase{.cp = 4, .recompute = true},
                                           RingBytesCase{.cp = 2, .tp = 2, .micro_batches = 2, .recompute = true},
                                           RingBytesCase{.cp = 2, .bf16 = true},
                                           RingBytesCase{.cp = 3, .micro_batches = 2, .bf16 = true},
                                           RingBytesCase{.cp = 2, .tp = 2, .micro_batches = 2, .recompute = true, .bf16 = true}),
                         [](const auto& info) {
                           const RingBytesCase& c = info.param;
                           return "cp" + std::to_string(c.cp) + "tp" + std::to_string(c.tp) + "m" +
                                  std::to_string(c.micro_batches) + (c.recompute ? "_recompute" : "") +
                                  (c.bf16 ? "_bf16" : "");
                         });

}  // namespace
}  // namespace loom::parallel::cp
