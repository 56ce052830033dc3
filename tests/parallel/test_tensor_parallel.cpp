// Tensor parallelism against the serial layers and the serial run. Each parallel layer
// alone, over a tensor-parallel group of the whole world (t = 1, 2, 4, 8), must give the
// serial layer's output and input/weight gradients (relative 1e-5, against the largest
// magnitude); the whole GPT trained 20 steps under tp (and dp x tp, and with ZeRO-1) must
// give the serial run's losses (relative 1e-5) and parameters (relative 1e-4).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "comm/mpi_test_env.hpp"
#include "loom/error.hpp"
#include "loom/nn/cross_entropy_loss.hpp"
#include "loom/parallel/tensor_parallel/column_parallel_linear.hpp"
#include "loom/parallel/tensor_parallel/row_parallel_linear.hpp"
#include "loom/parallel/tensor_parallel/vocab_parallel_cross_entropy.hpp"
#include "loom/parallel/tensor_parallel/vocab_parallel_embedding.hpp"
#include "parallel/equivalence.hpp"
#include "test_util.hpp"

namespace loom::parallel::tp {
namespace {

using loom::testing::all_close;
using loom::testing::random_vector;
using loom::testing::world;
using namespace loom::testing::equivalence;

Tensor tensor_of(const std::vector<float>& v, const Shape& shape) {
  Tensor t = Tensor::empty(shape);
  std::copy(v.begin(), v.end(), t.f32());
  return t;
}

// Relative to the reference's largest magnitude: sums reordered across ranks differ by rounding.
::testing::AssertionResult close(const Tensor& got, const Tensor& want, const std::string& what) {
  float scale = 0.0f;
  for (int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, std::fabs(want.f32()[i]));
  if (got.shape() != want.shape()) return ::testing::AssertionFailure() << what << ": shape " << shape_str(got.shape());
  return all_close(got.f32(), want.f32(), want.numel(), 0, 1e-5 * scale + 1e-7, what);
}

// The serial layer's weight, gradient sliced as the parallel layer holds it.
Tensor slice_of(const Tensor& full, const nn::Parameter& p) {
  Tensor local = Tensor::empty(p.shape());
  nn::copy_shard(full, local, p.shard_spec());
  return local;
}

void copy_weights(nn::Linear& serial, nn::Linear& parallel) {
  Tensor w = slice_of(serial.weight().value(), parallel.weight());
  parallel.weight().value().copy_from(w);
  Tensor b = parallel.bias()->shard_spec().sharded() ? slice_of(serial.bias()->value(), *parallel.bias())
                                                     : serial.bias()->value();
  parallel.bias()->value().copy_from(b);
}

void randomize(nn::Linear& l, uint64_t seed) {
  l.weight().value().copy_from(tensor_of(random_vector(l.weight().numel(), seed), l.weight().shape()));
  l.bias()->value().copy_from(tensor_of(random_vector(l.bias()->numel(), seed + 1), l.bias()->shape()));
}

class ColumnParallel : public ::testing::TestWithParam<int64_t> {};

TEST_P(ColumnParallel, MatchesTheSerialLinear) {
  const int64_t blocks = GetParam(), C = 8, OC = 8 * blocks * world().size(), N = 6;
  nn::Linear serial(C, OC);
  randomize(serial, 7);
  ColumnParallelLinear parallel(C, OC, blocks, world());
  copy_weights(serial, parallel);
  const Tensor x = tensor_of(random_vector(N * C, 3), {N, C});
  nn::Context sc, pc;
  const Tensor y_serial = serial.forward(x, sc);
  const Tensor y_parallel = parallel.forward(x, pc);
  // This rank's output columns are its slice of the serial output (columns = output features).
  Tensor want_y = Tensor::empty({N, OC / world().size()});
  nn::copy_shard(y_serial, want_y, nn::ShardSpec{1, world().size(), world().rank(), blocks});
  EXPECT_TRUE(close(y_parallel, want_y, "column-parallel output"));

  const Tensor dy = tensor_of(random_vector(N * OC, 5), {N, OC});
  Tensor dy_local = Tensor::empty({N, OC / world().size()});
  nn::copy_shard(dy, dy_local, nn::ShardSpec{1, world().size(), world().rank(), blocks});
  EXPECT_TRUE(close(parallel.backward(dy_local, pc), serial.backward(dy, sc), "column-parallel dx (f's sum)"));
  EXPECT_TRUE(close(parallel.weight().grad(), slice_of(serial.weight().grad(), parallel.weight()), "dW"));
  EXPECT_TRUE(close(parallel.bias()->grad(), slice_of(serial.bias()->grad(), *parallel.bias()), "db"));
}

INSTANTIATE_TEST_SUITE_P(Blocks, ColumnParallel, ::testing::Values(1, 3),
                         [](const auto& info) { return info.param == 1 ? std::string("plain") : std::string("fused_qkv"); });

TEST(RowParallel, MatchesTheSerialLinear) {
  const int64_t C = 8 * world().size(), OC = 12, N = 6;
  nn::Linear serial(C, OC);
  randomize(serial, 11);
  RowParallelLinear parallel(C, OC, world());
  copy_weights(serial, parallel);
  const nn::ShardSpec columns{1, world().size(), world().rank(), 1};
  const Tensor x = tensor_of(random_vector(N * C, 13), {N, C});
  Tensor x_local = Tensor::empty({N, C / world().size()});
  nn::copy_shard(x, x_local, columns);
  nn::Context sc, pc;
  EXPECT_TRUE(close(parallel.forward(x_local, pc), serial.forward(x, sc), "row-parallel output (g's sum)"));
  const Tensor dy = tensor_of(random_vector(N * OC, 17), {N, OC});
  const Tensor dx_serial = serial.backward(dy, sc);
  Tensor want_dx = Tensor::empty({N, C / world().size()});
  nn::copy_shard(dx_serial, want_dx, columns);
  EXPECT_TRUE(close(parallel.backward(dy, pc), want_dx, "row-parallel dx"));
  EXPECT_TRUE(close(parallel.weight().grad(), slice_of(serial.weight().grad(), parallel.weight()), "dW"));
  EXPECT_TRUE(close(parallel.bias()->grad(), serial.bias()->grad(), "db (replicated)"));
}

TEST(VocabParallel, EmbeddingAndCrossEntropyMatchSerial) {
  const int64_t t = world().size(), V = 50, Vp = 16 * t * ((V + 16 * t - 1) / (16 * t)), T = 5, B = 2, C = 8;
  nn::Embedding serial(V, Vp, T, C);
  serial.wte().value().copy_from(tensor_of(random_vector(Vp * C, 19), {Vp, C}));
  serial.wpe().value().copy_from(tensor_of(random_vector(T * C, 23), {T, C}));
  VocabParallelEmbedding parallel(V, Vp, T, C, world());
  parallel.wte().value().copy_from(slice_of(serial.wte().value(), parallel.wte()));
  parallel.wpe().value().copy_from(serial.wpe().value());
  Tensor idx = Tensor::empty({B, T}, DType::I32);
  for (int64_t i = 0; i < B * T; ++i) idx.i32()[i] = static_cast<int32_t>((i * 17 + 3) % V);
  nn::Context sc, pc;
  EXPECT_TRUE(close(parallel.forward(idx, pc), serial.forward(idx, sc), "embedding output"));
  const Tensor dy = tensor_of(random_vector(B * T * C, 29), {B, T, C});
  serial.backward(dy, sc);
  parallel.backward(dy, pc);
  EXPECT_TRUE(close(parallel.wte().grad(), slice_of(serial.wte().grad(), parallel.wte()), "dwte"));
  EXPECT_TRUE(close(parallel.wpe().grad(), serial.wpe().grad(), "dwpe"));

  // Cross-entropy over logits split by vocabulary, padding columns included.
  Tensor logits = tensor_of(random_vector(B * T * Vp, 31, -3.0f, 3.0f), {B, T, Vp});
  const nn::ShardSpec vocab{2, t, world().rank(), 1};
  Tensor local = Tensor::empty({B, T, Vp / t});
  nn::copy_shard(logits, local, vocab);
  VocabParallelCrossEntropy ce(V, world().rank() * (Vp / t), world());
  const float loss = ce.forward(local, idx);
  const float want = nn::cross_entropy_loss(logits, idx, V);
  EXPECT_NEAR(loss, want, 1e-5 * std::fabs(want)) << "vocab-parallel loss";
  ce.backward(local, idx, 0.5f);
  nn::cross_entropy_loss_backward(logits, idx, V, 0.5f);
  Tensor want_local = Tensor::empty({B, T, Vp / t});
  nn::copy_shard(logits, want_local, vocab);
  EXPECT_TRUE(close(local, want_local, "vocab-parallel dlogits"));
}

// The whole GPT under dp x tp against the serial run of the same global batch.
struct Layout {
  int64_t tp;
  int zero;
};

void PrintTo(const Layout& l, std::ostream* os) { *os << "tp " << l.tp << ", zero " << l.zero; }

class TensorParallelGpt : public ::testing::TestWithParam<Layout> {};

TEST_P(TensorParallelGpt, SameLossesAndParametersAsSerial) {
  const Layout layout = GetParam();
  const int p = world().size();
  if (p % layout.tp != 0 || (layout.tp == 1 && layout.zero == 0)) GTEST_SKIP() << "layout does not fit " << p << " ranks";
  const int64_t dp = p / layout.tp;
  auto config = [&](int64_t dp_degree, int64_t batch) {
    train::TrainConfig c = tiny(dp_degree, batch, 1);
    c.model.n_head = 4;
    c.model.padded_vocab_size = 64 * layout.tp * ((65 + 64 * layout.tp - 1) / (64 * layout.tp));
    return c;
  };
  train::Trainer serial(config(1, 2 * dp), true);
  const TrainingRun want = run(serial);
  train::TrainConfig c = config(dp, 2);
  c.tp = layout.tp;
  c.zero = layout.zero;
  train::Trainer parallel(c, true, &world());
  expect_equivalent(run(parallel), want, c,
                    "dp " + std::to_string(dp) + " x tp " + std::to_string(layout.tp) + ", zero " + std::to_string(layout.zero));
}

INSTANTIATE_TEST_SUITE_P(Layouts, TensorParallelGpt,
                         ::testing::Values(Layout{2, 0}, Layout{4, 0}, Layout{2, 1}, Layout{4, 1}),
                         [](const auto& info) {
                           return "tp" + std::to_string(info.param.tp) + "_zero" + std::to_string(info.param.zero);
                         });

TEST(TensorParallelGpt, HeadsMustDivideAmongRanks) {
  const int p = world().size();
  if (p < 2) GTEST_SKIP() << "needs tp > 1";
  train::TrainConfig c = tiny(1, 2, 1);
  c.model.n_head = 2 * p + 1;
  c.model.n_embd = 4 * (2 * p + 1);
  c.tp = p;
  try {
    train::Trainer t(c, true, &world());
    FAIL() << "expected an error";
  } catch (const loom::Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be divisible by the tensor-parallel degree tp (" + std::to_string(p) + ")"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace loom::parallel::tp
