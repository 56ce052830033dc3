// 3D tensor parallelism's communication, measured: the bytes one training step moves along
// each grid axis (row, col, depth: the payload every collective on the mesh's axis groups is
// given) equal plan::tensor_parallel_3d_bytes_per_step for each grid of the world, with two
// micro-batches, and with models whose layers do not all divide the grid (those stay serial);
// in bf16 the activations and the weights gathered over depth cross at 2 bytes a value, the
// gradients reduce-scattered and averaged over depth at 4.
#include <gtest/gtest.h>

#include <string>

#include "comm/mpi_test_env.hpp"
#include "loom/parallel/tensor_parallel_3d/layers_3d.hpp"
#include "loom/plan/tensor_parallel_3d_cost.hpp"
#include "loom/train/trainer.hpp"
#include "parallel/equivalence.hpp"

namespace loom::parallel::tp3d {
namespace {

using loom::testing::world;
using namespace loom::testing::equivalence;

struct BytesCase {
  int64_t R, C, D;
  int64_t n_embd = 16;
  bool bf16 = false;
  int64_t experts = 0;  // a mixture of experts (top-2, dropless) in every other block
};

void PrintTo(const BytesCase& c, std::ostream* os) {
  *os << c.R << "x" << c.C << "x" << c.D << " C=" << c.n_embd << (c.bf16 ? " bf16" : "") << " E=" << c.experts;
}

class Bytes3D : public ::testing::TestWithParam<BytesCase> {};

TEST_P(Bytes3D, MeasuredBytesPerAxisEqualTheModel) {
  const BytesCase k = GetParam();
  const int64_t p = world().size();
  if (p != k.R * k.C * k.D) GTEST_SKIP() << "a grid of " << k.R * k.C * k.D << " ranks";
  train::TrainConfig c = tiny(1, 2, 2);
  c.model.n_head = 4;
  c.model.n_embd = k.n_embd;
  c.model.padded_vocab_size = 128;
  c.tp_3d = std::to_string(k.R) + "," + std::to_string(k.C) + "," + std::to_string(k.D);
  if (k.bf16) c.precision = "bf16";
  c.model.moe.experts = k.experts;
  c.model.moe.every = 2;
  train::Trainer t(c, true, &world());
  const train::Parallelized& pz = t.parallelized();
  for (const char* axis : {"row", "col", "depth", "plane"}) pz.group(axis).reset_stats();
  t.train_step();
  plan::Gpt3DShape shape;
  shape.B = c.batch_size;
  shape.T = c.model.block_size;
  shape.C = c.model.n_embd;
  shape.L = c.model.n_layer;
  shape.Vp = c.model.padded_vocab_size;
  shape.block_size = c.model.block_size;
  shape.M = c.micro_batches;
  if (k.experts > 0) {  // the MoE blocks first: their order does not change the bytes
    shape.moe_blocks = c.model.n_layer / 2;
    shape.experts = k.experts;
    shape.top_k = c.model.moe.top_k;
    shape.expert_split = Layers3D::expert_split(k.experts, {k.R, k.C, k.D});
  }
  const plan::Grid3DBytes want = plan::tensor_parallel_3d_bytes_per_step(shape, k.R, k.C, k.D, k.bf16 ? 2 : 4, 4);
  EXPECT_EQ(pz.group("row").stats().bytes, want.row) << "row";
  EXPECT_EQ(pz.group("col").stats().bytes, want.col) << "col";
  EXPECT_EQ(pz.group("depth").stats().bytes, want.depth) << "depth";
  EXPECT_EQ(pz.group("plane").stats().bytes, want.plane) << "plane";
}

INSTANTIATE_TEST_SUITE_P(Grids, Bytes3D,
                         ::testing::Values(BytesCase{2, 1, 1}, BytesCase{1, 2, 1}, BytesCase{1, 1, 2}, BytesCase{2, 2, 1},
                                           BytesCase{1, 2, 2}, BytesCase{2, 2, 2},
                                           // Layers kept serial: width 16 on depth 3 (only QKV's 48 rows
                                           // split), width 12 on depth 8 (only fc's 48 rows split).
                                           BytesCase{1, 1, 3}, BytesCase{1, 1, 8, 12},
                                           BytesCase{2, 1, 1, 16, true}, BytesCase{1, 1, 2, 16, true},
                                           BytesCase{1, 2, 2, 16, true}, BytesCase{2, 2, 2, 16, true},
                                           BytesCase{1, 1, 3, 16, true},
                                           // A mixture of experts every other block: 4 experts over
                                           // planes of 2 and 4 ranks, whole on a depth-only grid, 3
                                           // that do not divide the plane (whole on every plane rank).
                                           BytesCase{2, 1, 1, 16, false, 4}, BytesCase{2, 2, 1, 16, false, 4},
                                           BytesCase{1, 2, 2, 16, true, 4}, BytesCase{1, 1, 2, 16, false, 4},
                                           BytesCase{2, 1, 2, 16, false, 3}),
                         [](const auto& info) {
                           const BytesCase& c = info.param;
                           return "r" + std::to_string(c.R) + "c" + std::to_string(c.C) + "d" + std::to_string(c.D) +
                                  "_C" + std::to_string(c.n_embd) + (c.bf16 ? "_bf16" : "") +
                                  (c.experts > 0 ? "_moe" + std::to_string(c.experts) : "");
                         });

}  // namespace
}  // namespace loom::parallel::tp3d
