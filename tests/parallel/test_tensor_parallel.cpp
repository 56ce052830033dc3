// Tensor parallelism against the serial layers and the serial run. Each parallel layer
// alone, over a tensor-parallel group of the whole world (t = 1..8), with and without
// sequence parallelism, must give the serial layer's output and input/weight gradients
// (relative 1e-5, against the largest magnitude); the whole GPT trained 20 steps under tp
// (and dp x tp, with ZeRO, with sequence parallelism) must give the serial run's losses
// (relative 1e-5) and parameters (relative 1e-4); one layer's saved activations must match
// plan::activation_bytes_per_layer within 10% (plan::bf16_activation_bytes_per_layer in bf16,
// about half the fp32 bytes), and a recomputed block exactly its input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "comm/mpi_test_env.hpp"
#include "loom/error.hpp"
#include "loom/nn/cross_entropy_loss.hpp"
#include "loom/nn/gemm_input.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/parallel/tensor_parallel/tensor_parallel_layers.hpp"
#include "loom/plan/comm_cost.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/plan/memory_model.hpp"
#include "loom/plan/mixed_precision_cost.hpp"
#include "loom/plan/moe_cost.hpp"
#include "loom/parallel/tensor_parallel/column_parallel_linear.hpp"
#include "loom/parallel/tensor_parallel/row_parallel_linear.hpp"
#include "loom/parallel/tensor_parallel/vocab_parallel_cross_entropy.hpp"
#include "loom/parallel/tensor_parallel/vocab_parallel_embedding.hpp"
#include "loom/parallel/tensor_parallel/vocab_parallel_head.hpp"
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

// This rank's chunk of the sequence (dim 1 of (B, T, C)), as sequence parallelism holds it.
Tensor sequence_chunk(const Tensor& full) {
  Shape shape = full.shape();
  shape[1] /= world().size();
  Tensor local = Tensor::empty(shape);
  nn::copy_shard(full, local, nn::ShardSpec{1, world().size(), world().rank(), 1});
  return local;
}

// This rank's slice of the features (last dim), in `blocks` blocks.
Tensor feature_slice(const Tensor& full, int64_t blocks = 1) {
  Shape shape = full.shape();
  shape.back() /= world().size();
  Tensor local = Tensor::empty(shape);
  nn::copy_shard(full, local, nn::ShardSpec{static_cast<int>(shape.size()) - 1, world().size(), world().rank(), blocks});
  return local;
}

// A replicated parameter's gradient under sequence parallelism is partial: the sum over tp.
Tensor summed(const Tensor& partial) {
  Tensor sum = Tensor::empty(partial.shape());
  sum.copy_from(partial);
  world().all_reduce(sum, comm::ReduceOp::Sum);
  return sum;
}

struct LayerCase {
  int64_t blocks;
  bool sequence_parallel;
  bool overlap = false;  // tp_overlap: the collectives under the GEMMs
};

void PrintTo(const LayerCase& c, std::ostream* os) {
  *os << c.blocks << " block(s)" << (c.sequence_parallel ? ", sequence parallel" : "") << (c.overlap ? ", overlap" : "");
}

std::string layer_case_name(const ::testing::TestParamInfo<LayerCase>& info) {
  return (info.param.blocks == 1 ? std::string("plain") : std::string("fused_qkv")) + (info.param.sequence_parallel ? "_sp" : "") +
         (info.param.overlap ? "_overlap" : "");
}

class ColumnParallel : public ::testing::TestWithParam<LayerCase> {};

TEST_P(ColumnParallel, MatchesTheSerialLinear) {
  const auto [blocks, sp, overlap] = GetParam();
  const int64_t t = world().size(), C = 8, OC = 8 * blocks * t, B = 2, T = 2 * t;
  nn::Linear serial(C, OC);
  randomize(serial, 7);
  ColumnParallelLinear parallel(C, OC, blocks, world(), sp, /*gather_output=*/false, overlap);
  copy_weights(serial, parallel);
  const Tensor x = tensor_of(random_vector(B * T * C, 3), {B, T, C});
  nn::Context sc, pc;
  const Tensor y_serial = serial.forward(x, sc);
  // This rank's output features of the whole sequence, from the whole input or its chunk of it.
  EXPECT_TRUE(close(parallel.forward(sp ? sequence_chunk(x) : x, pc), feature_slice(y_serial, blocks), "output"));
  const Tensor dy = tensor_of(random_vector(B * T * OC, 5), {B, T, OC});
  const Tensor dx_serial = serial.backward(dy, sc);
  EXPECT_TRUE(close(parallel.backward(feature_slice(dy, blocks), pc), sp ? sequence_chunk(dx_serial) : dx_serial,
                    "dx (f's backward: sum, or reduce-scatter)"));
  EXPECT_TRUE(close(parallel.weight().grad(), slice_of(serial.weight().grad(), parallel.weight()), "dW"));
  EXPECT_TRUE(close(parallel.bias()->grad(), slice_of(serial.bias()->grad(), *parallel.bias()), "db"));
}

TEST(ColumnParallel, GatheredOutputIsTheSerialOutput) {
  const int64_t t = world().size(), C = 8, OC = 8 * 3 * t, B = 2, T = 3;
  nn::Linear serial(C, OC);
  randomize(serial, 37);
  ColumnParallelLinear parallel(C, OC, /*blocks=*/3, world(), /*sequence_parallel=*/false, /*gather_output=*/true);
  copy_weights(serial, parallel);
  const Tensor x = tensor_of(random_vector(B * T * C, 41), {B, T, C});
  nn::Context sc, pc;
  EXPECT_TRUE(close(parallel.forward(x, pc), serial.forward(x, sc), "gathered output"));
  const Tensor dy = tensor_of(random_vector(B * T * OC, 43), {B, T, OC});
  EXPECT_TRUE(close(parallel.backward(dy, pc), serial.backward(dy, sc), "dx"));
  EXPECT_TRUE(close(parallel.weight().grad(), slice_of(serial.weight().grad(), parallel.weight()), "dW"));
}

INSTANTIATE_TEST_SUITE_P(Cases, ColumnParallel,
                         ::testing::Values(LayerCase{1, false}, LayerCase{3, false}, LayerCase{1, true}, LayerCase{3, true},
                                           LayerCase{1, false, true}, LayerCase{3, true, true}),
                         layer_case_name);

class RowParallel : public ::testing::TestWithParam<LayerCase> {};

TEST_P(RowParallel, MatchesTheSerialLinear) {
  const bool sp = GetParam().sequence_parallel;
  // T = 3t: a rank's chunk of 2 x 3 rows goes to the reduce-scatter in 4 uneven pieces.
  const int64_t t = world().size(), C = 8 * t, OC = 12, B = 2, T = 3 * t;
  nn::Linear serial(C, OC);
  randomize(serial, 11);
  RowParallelLinear parallel(C, OC, world(), sp, GetParam().overlap);
  copy_weights(serial, parallel);
  const Tensor x = tensor_of(random_vector(B * T * C, 13), {B, T, C});
  nn::Context sc, pc;
  const Tensor y_serial = serial.forward(x, sc);
  EXPECT_TRUE(close(parallel.forward(feature_slice(x), pc), sp ? sequence_chunk(y_serial) : y_serial,
                    "output (g: sum, or reduce-scatter)"));
  const Tensor dy = tensor_of(random_vector(B * T * OC, 17), {B, T, OC});
  const Tensor dx_serial = serial.backward(dy, sc);
  EXPECT_TRUE(close(parallel.backward(sp ? sequence_chunk(dy) : dy, pc), feature_slice(dx_serial), "dx"));
  EXPECT_TRUE(close(parallel.weight().grad(), slice_of(serial.weight().grad(), parallel.weight()), "dW"));
  EXPECT_TRUE(close(sp ? summed(parallel.bias()->grad()) : parallel.bias()->grad(), serial.bias()->grad(),
                    "db (replicated)"));
}

INSTANTIATE_TEST_SUITE_P(Cases, RowParallel,
                         ::testing::Values(LayerCase{1, false}, LayerCase{1, true}, LayerCase{1, true, true}),
                         layer_case_name);

// tp_overlap only starts the blocking path's collectives earlier and waits for them later,
// around the same GEMMs: the layers' outputs and gradients must be the same bits either way.
TEST(TensorParallelOverlap, LayersGiveTheBlockingPathsBits) {
  const int64_t t = world().size(), C = 8 * t, OC = 8 * t, B = 2, T = 3 * t;
  for (const bool sp : {false, true}) {
    std::vector<std::vector<float>> results[2];
    for (const bool overlap : {false, true}) {
      ColumnParallelLinear column(C, OC, /*blocks=*/1, world(), sp, /*gather_output=*/false, overlap);
      RowParallelLinear row(OC, C, world(), sp, overlap);
      randomize(column, 51);
      randomize(row, 53);
      const Tensor x = tensor_of(random_vector(B * (sp ? T / t : T) * C, 55), {B, sp ? T / t : T, C});
      nn::Context ctx;
      const Tensor y = row.forward(column.forward(x, ctx), ctx);
      const Tensor dx = column.backward(row.backward(y, ctx), ctx);
      const std::initializer_list<const Tensor*> outcomes = {&y, &dx, &column.weight().grad(), &column.bias()->grad(),
                                                             &row.weight().grad(), &row.bias()->grad()};
      for (const Tensor* r : outcomes) results[overlap].emplace_back(r->f32(), r->f32() + r->numel());
    }
    EXPECT_EQ(results[0], results[1]) << (sp ? "with" : "without") << " sequence parallelism";
  }
}

// The tied LM head over this rank's vocabulary rows (the token table split by rows) against
// the serial head: logits, input gradient (summed over the ranks' vocabularies) and dW.
struct HeadCase {
  bool sequence_parallel;
  bool overlap;
};

// The token table (V, C) of a serial head, and this rank's rows of it.
struct HeadWeights {
  nn::Parameter serial, local;
  HeadWeights(int64_t V, int64_t C, uint64_t seed)
      : serial("wte", {V, C}, true), local("wte", {V / world().size(), C}, true) {
    local.set_shard_spec(nn::ShardSpec{0, world().size(), world().rank(), 1});
    serial.value().copy_from(tensor_of(random_vector(V * C, seed), {V, C}));
    local.value().copy_from(slice_of(serial.value(), local));
  }
};

class VocabParallelHeadLayer : public ::testing::TestWithParam<HeadCase> {};

TEST_P(VocabParallelHeadLayer, MatchesTheSerialHead) {
  const auto [sp, overlap] = GetParam();
  const int64_t t = world().size(), V = 16 * t, C = 8, B = 2, T = 3 * t;
  HeadWeights w(V, C, 61);
  const VocabParallelHead head{world(), sp, overlap};
  const Tensor x = tensor_of(random_vector(B * T * C, 67), {B, T, C});
  const Tensor x_local = sp ? sequence_chunk(x) : x;
  const Tensor logits = nn::serial_layers().head_logits(x, w.serial);
  EXPECT_TRUE(close(head.logits(x_local, w.local), feature_slice(logits), "logits (this rank's vocabulary)"));
  const Tensor dlogits = tensor_of(random_vector(B * T * V, 71), {B, T, V});
  const Tensor dx = nn::serial_layers().head_backward(dlogits, x, w.serial);
  EXPECT_TRUE(close(head.backward(feature_slice(dlogits), x_local, w.local), sp ? sequence_chunk(dx) : dx,
                    "dx (f's backward: sum, or reduce-scatter)"));
  EXPECT_TRUE(close(w.local.grad(), slice_of(w.serial.grad(), w.local), "dW"));
}

INSTANTIATE_TEST_SUITE_P(Cases, VocabParallelHeadLayer,
                         ::testing::Values(HeadCase{false, false}, HeadCase{false, true}, HeadCase{true, false},
                                           HeadCase{true, true}),
                         [](const auto& info) {
                           return std::string(info.param.sequence_parallel ? "sp" : "plain") +
                                  (info.param.overlap ? "_overlap" : "");
                         });

// The head under tp_overlap gives the blocking head's bits: logits, dx and dW, with and without
// sequence parallelism, in fp32 and in bf16 (activations bf16 on the wire, the kept input a bf16
// copy, and more rows than one of the backward's bf16 pieces, nn::kHeadGradientRows).
TEST(TensorParallelOverlap, HeadGivesTheBlockingPathsBits) {
  const int64_t t = world().size(), V = 16 * t, C = 8, B = 2, T = 520 * t;
  static_assert(2 * 520 > nn::kHeadGradientRows);
  for (const kernels::Precision precision : {kernels::Precision::F32, kernels::Precision::BF16}) {
    const kernels::PrecisionScope scope(precision);
    const bool bf16 = precision == kernels::Precision::BF16;
    world().set_activation_dtype(bf16 ? DType::BF16 : DType::F32);
    for (const bool sp : {false, true}) {
      std::vector<std::vector<float>> results[2];
      const int64_t Tl = sp ? T / t : T;
      for (const bool overlap : {false, true}) {
        HeadWeights w(V, C, 73);
        const VocabParallelHead head{world(), sp, overlap};
        const Tensor x = tensor_of(random_vector(B * Tl * C, 79), {B, Tl, C});
        const Tensor logits = head.logits(x, w.local);
        const Tensor dlogits = tensor_of(random_vector(logits.numel(), 83), logits.shape());
        const Tensor dx = head.backward(dlogits, nn::in_compute_precision(x), w.local);
        for (const Tensor* r : std::initializer_list<const Tensor*>{&logits, &dx, &w.local.grad()})
          results[overlap].emplace_back(r->f32(), r->f32() + r->numel());
      }
      EXPECT_EQ(results[0], results[1]) << (sp ? "with" : "without") << " sequence parallelism, "
                                        << (bf16 ? "bf16" : "fp32");
    }
  }
  world().set_activation_dtype(DType::F32);
}

class VocabParallel : public ::testing::TestWithParam<bool> {};

TEST_P(VocabParallel, EmbeddingAndCrossEntropyMatchSerial) {
  const bool sp = GetParam();
  const int64_t t = world().size(), V = 50, Vp = 16 * t * ((V + 16 * t - 1) / (16 * t)), T = 2 * t, B = 2, C = 8;
  nn::Embedding serial(V, Vp, T, C);
  serial.wte().value().copy_from(tensor_of(random_vector(Vp * C, 19), {Vp, C}));
  serial.wpe().value().copy_from(tensor_of(random_vector(T * C, 23), {T, C}));
  VocabParallelEmbedding parallel(V, Vp, T, C, world(), sp);
  parallel.wte().value().copy_from(slice_of(serial.wte().value(), parallel.wte()));
  parallel.wpe().value().copy_from(serial.wpe().value());
  Tensor idx = Tensor::empty({B, T}, DType::I32);
  for (int64_t i = 0; i < B * T; ++i) idx.i32()[i] = static_cast<int32_t>((i * 17 + 3) % V);
  nn::Context sc, pc;
  const Tensor out_serial = serial.forward(idx, sc);
  EXPECT_TRUE(close(parallel.forward(idx, pc), sp ? sequence_chunk(out_serial) : out_serial, "embedding output"));
  const Tensor dy = tensor_of(random_vector(B * T * C, 29), {B, T, C});
  serial.backward(dy, sc);
  parallel.backward(sp ? sequence_chunk(dy) : dy, pc);
  EXPECT_TRUE(close(parallel.wte().grad(), slice_of(serial.wte().grad(), parallel.wte()), "dwte"));
  EXPECT_TRUE(close(sp ? summed(parallel.wpe().grad()) : parallel.wpe().grad(), serial.wpe().grad(), "dwpe"));
  if (sp) return;  // the loss sees whole sequences either way

  // Cross-entropy over logits split by vocabulary, padding columns included.
  Tensor logits = tensor_of(random_vector(B * T * Vp, 31, -3.0f, 3.0f), {B, T, Vp});
  Tensor local = feature_slice(logits);
  VocabParallelCrossEntropy ce(V, world().rank() * (Vp / t), world());
  const float loss = ce.forward(local, idx);
  const float want = nn::cross_entropy_loss(logits, idx, V);
  EXPECT_NEAR(loss, want, 1e-5 * std::fabs(want)) << "vocab-parallel loss";
  ce.backward(local, idx, 0.5f);
  nn::cross_entropy_loss_backward(logits, idx, V, 0.5f);
  EXPECT_TRUE(close(local, feature_slice(logits), "vocab-parallel dlogits"));
}

INSTANTIATE_TEST_SUITE_P(Cases, VocabParallel, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? std::string("sp") : std::string("plain"); });

// The whole GPT under dp x tp against the serial run of the same global batch.
struct Layout {
  int64_t tp;
  int zero;
  bool sequence_parallel;
  int64_t micro_batches = 1;
};

void PrintTo(const Layout& l, std::ostream* os) {
  *os << "tp " << l.tp << ", zero " << l.zero << (l.sequence_parallel ? ", sequence parallel" : "") << ", "
      << l.micro_batches << " micro-batches";
}

class TensorParallelGpt : public ::testing::TestWithParam<Layout> {};

TEST_P(TensorParallelGpt, SameLossesAndParametersAsSerial) {
  const Layout layout = GetParam();
  const int p = world().size();
  if (p % layout.tp != 0 || (layout.tp == 1 && layout.zero == 0)) GTEST_SKIP() << "layout does not fit " << p << " ranks";
  const int64_t dp = p / layout.tp;
  auto config = [&](int64_t dp_degree, int64_t batch) {
    train::TrainConfig c = tiny(dp_degree, batch, layout.micro_batches);
    c.model.n_head = 4;
    c.model.padded_vocab_size = 64 * layout.tp * ((65 + 64 * layout.tp - 1) / (64 * layout.tp));
    return c;
  };
  const TrainingRun& want = serial_run(config(1, 2 * dp));
  train::TrainConfig c = config(dp, 2);
  c.tp = layout.tp;
  c.zero = layout.zero;
  c.sequence_parallel = layout.sequence_parallel;
  train::Trainer parallel(c, true, &world());
  EXPECT_EQ(parallel.model().num_parameters(), parallel.config().model.num_parameters(layout.tp));
  expect_equivalent(run(parallel), want, c,
                    "dp " + std::to_string(dp) + " x tp " + std::to_string(layout.tp) + ", zero " +
                        std::to_string(layout.zero) + (layout.sequence_parallel ? ", SP" : ""));
}

INSTANTIATE_TEST_SUITE_P(Layouts, TensorParallelGpt,
                         ::testing::Values(Layout{2, 0, false}, Layout{4, 0, false}, Layout{2, 1, false},
                                           Layout{4, 1, false}, Layout{2, 3, false}, Layout{2, 0, true},
                                           Layout{4, 0, true}, Layout{2, 1, true}, Layout{4, 2, true},
                                           Layout{2, 0, true, 3}, Layout{2, 2, true, 3}),
                         [](const auto& info) {
                           return "tp" + std::to_string(info.param.tp) + "_zero" + std::to_string(info.param.zero) +
                                  (info.param.sequence_parallel ? "_sp" : "") +
                                  (info.param.micro_batches > 1 ? "_mb" + std::to_string(info.param.micro_batches) : "");
                         });

// Without and with sequence parallelism, in fp32 and in bf16: a bf16 run moves its
// activations at 2 bytes a value (comm/activation_wire.hpp), the loss's statistics and the
// replicated parameters' gradients at 4, which the count takes as its activation_bytes.
struct Traffic {
  bool sequence_parallel;
  std::string precision = "fp32";
  int64_t experts = 0;  // a mixture of experts in every block (ep 1)
  double capacity_factor = 0.0;  // 0: dropless
};

class TensorParallelTraffic : public ::testing::TestWithParam<Traffic> {};

TEST_P(TensorParallelTraffic, BytesPerStepMatchTheAnalyticCount) {
  const bool sp = GetParam().sequence_parallel;
  const int p = world().size();
  if (p < 2) GTEST_SKIP() << "needs tp > 1";
  train::TrainConfig c = tiny(1, 2, 2);
  c.model.n_head = 2 * p;
  c.model.n_embd = 8 * p;
  c.model.block_size = 4 * p;
  c.tp = p;
  c.sequence_parallel = sp;
  c.precision = GetParam().precision;
  c.model.moe.experts = GetParam().experts;
  c.model.moe.capacity_factor = GetParam().capacity_factor;
  const plan::TensorParallelMoe moe{c.model.moe.enabled() ? c.model.n_layer : 0,
                                    c.model.moe.experts,
                                    c.model.moe.experts,
                                    false,
                                    c.model.moe.top_k,
                                    c.model.moe.capacity_factor > 0.0};
  const int64_t wire = c.precision == "bf16" ? 2 : 4;
  const int64_t want = plan::tensor_parallel_bytes_per_step(c.batch_size, c.model.block_size, c.model.n_embd,
                                                            c.model.n_layer, c.model.block_size, c.micro_batches, sp,
                                                            /*zero_stage=*/0, wire, moe);
  for (const char* overlap : {"on", "off"}) {  // the overlap moves the blocking path's bytes
    c.tp_overlap = overlap;
    train::Trainer t(c, true, &world());
    const train::StepResult r = t.train_step();
    EXPECT_EQ(r.tp_comm_bytes, want) << (sp ? "with" : "without") << " sequence parallelism, " << c.precision
                                     << ", tp_overlap " << overlap;
    EXPECT_GT(r.tp_comm_seconds, 0.0);
    EXPECT_GE(r.tp_comm_exposed_seconds, 0.0) << "the progress line's exposed tp communication";
    // A mixture of experts without sequence parallelism is told what it pays, and how not to.
    const std::vector<std::string>& notes = t.parallelized().notes;
    const bool hint = std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
      return n.find("--sequence-parallel splits the tokens over tp") != std::string::npos;
    });
    EXPECT_EQ(hint, c.model.moe.enabled() && !sp);
  }
  if (wire == 2) {  // the activations' share is half the fp32 run's
    const int64_t fp32 = plan::tensor_parallel_bytes_per_step(c.batch_size, c.model.block_size, c.model.n_embd,
                                                              c.model.n_layer, c.model.block_size, c.micro_batches, sp,
                                                              0, 4, moe);
    const int64_t fixed = plan::tensor_parallel_bytes_per_step(c.batch_size, c.model.block_size, c.model.n_embd,
                                                               c.model.n_layer, c.model.block_size, c.micro_batches, sp,
                                                               0, 0, moe);
    EXPECT_EQ(2 * (want - fixed), fp32 - fixed);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, TensorParallelTraffic,
                         ::testing::Values(Traffic{false}, Traffic{true}, Traffic{false, "bf16"}, Traffic{true, "bf16"},
                                           Traffic{false, "fp32", 4}, Traffic{true, "fp32", 4}, Traffic{true, "bf16", 3},
                                           Traffic{true, "fp32", 4, 1.0}),
                         [](const auto& info) {
                           return std::string(info.param.sequence_parallel ? "sp" : "plain") +
                                  (info.param.precision == "bf16" ? "_bf16" : "") +
                                  (info.param.experts > 0 ? "_moe" + std::to_string(info.param.experts) : "") +
                                  (info.param.capacity_factor > 0 ? "_capacity" : "");
                         });

// Under expert parallelism with ZeRO-2 and 2 micro-batches (tp 2 with sequence parallelism x
// dp 2 = ep 2, 4 ranks): the dense replicated gradients are summed over tp every micro-batch
// (ZeRO-2 renews them), the local experts' once (they accumulate outside ZeRO).
TEST(TensorParallelTraffic, MoeUnderExpertParallelismAndZero2) {
  if (world().size() != 4) GTEST_SKIP() << "runs on 4 ranks";
  train::TrainConfig c = tiny(2, 2, 2);
  c.model.n_head = 4;
  c.model.n_embd = 16;
  c.model.block_size = 8;
  c.model.padded_vocab_size = 128;
  c.tp = 2;
  c.sequence_parallel = true;
  c.zero = 2;
  c.ep = 2;
  c.model.moe.experts = 4;
  const plan::TensorParallelMoe moe{c.model.n_layer, 4, 2, true};
  const int64_t want = plan::tensor_parallel_bytes_per_step(c.batch_size, c.model.block_size, c.model.n_embd,
                                                            c.model.n_layer, c.model.block_size, c.micro_batches, true,
                                                            2, 4, moe);
  train::Trainer t(c, true, &world());
  EXPECT_EQ(t.train_step().tp_comm_bytes, want);
}

// The whole run under tp_overlap is the blocking run bit for bit: losses, gradients and
// parameters, with and without sequence parallelism (the LM head's gather and reduce-scatter
// included), with recompute (a block's forward replayed in backward) and micro-batches
// (gradients accumulated across them), and in bf16 (activations rounded on the wire, widened
// when each started collective is waited for).
TEST(TensorParallelOverlap, TrainsBitForBitLikeTheBlockingPath) {
  const int p = world().size();
  if (p != 2 && p != 3 && p != 4) GTEST_SKIP() << "tp 2, tp 3 (odd) and tp 4";
  struct Variant {
    bool sp, recompute;
    const char* precision = "fp32";
  };
  for (const Variant v : {Variant{true, false}, Variant{true, true}, Variant{false, true}, Variant{true, false, "bf16"},
                          Variant{false, false, "bf16"}}) {
    std::vector<TrainingRun> runs;
    for (const char* overlap : {"off", "on"}) {
      train::TrainConfig c = tiny(1, 2, 2);
      c.model.n_head = 2 * p;
      c.model.n_embd = 8 * p;
      c.model.block_size = 4 * p;
      c.model.padded_vocab_size = 64 * p * ((65 + 64 * p - 1) / (64 * p));
      c.tp = p;
      c.sequence_parallel = v.sp;
      c.model.recompute = v.recompute;
      c.tp_overlap = overlap;
      c.precision = v.precision;
      c.steps = 3;
      train::Trainer t(c, true, &world());
      runs.push_back(run(t));
    }
    const std::string what =
        std::string(v.sp ? "sp" : "no sp") + (v.recompute ? ", recompute" : "") + ", " + v.precision;
    EXPECT_EQ(runs[0].losses, runs[1].losses) << what;
    EXPECT_EQ(runs[0].grads, runs[1].grads) << what;
    EXPECT_EQ(runs[0].params, runs[1].params) << what;
  }
}

// The model the activation tests measure: L blocks on t tp ranks, its vocabulary padded for t.
nn::GPTConfig activation_model(int64_t t, int64_t T, int64_t C, int64_t NH, int64_t L) {
  nn::GPTConfig config;
  config.vocab_size = 65;
  config.padded_vocab_size = 64 * t * ((65 + 64 * t - 1) / (64 * t));
  config.block_size = T;
  config.n_layer = L;
  config.n_head = NH;
  config.n_embd = C;
  return config;
}

// The activations a model keeps after one forward of B sequences (the tracker's category).
int64_t saved_after_forward(const nn::LayerBuilder& layers, const nn::GPTConfig& config, int64_t B) {
  nn::GPT model(config, 1, layers);
  Tensor idx = Tensor::zeros({B, config.block_size}, DType::I32);
  MemoryScope scope(MemoryCategory::Activations);
  const int64_t before = MemoryTracker::instance().current(MemoryCategory::Activations);
  nn::Context ctx;
  Tensor logits = model.forward(idx, ctx);
  return MemoryTracker::instance().current(MemoryCategory::Activations) - before;
}

class ActivationMemory : public ::testing::TestWithParam<bool> {};

TEST_P(ActivationMemory, PerLayerMatchesTheFormula) {
  // The activations one more layer keeps, measured as the difference between a 3- and a
  // 2-layer model's saved activations after forward, against plan::activation_bytes_per_layer.
  const bool sp = GetParam();
  const int64_t t = world().size();
  if (sp && t == 1) GTEST_SKIP() << "sequence parallelism needs tp > 1";
  const int64_t B = 2, T = 8 * t, C = 16 * t, NH = 2 * t;
  const int64_t Tr = sp ? T / t : T;  // tokens of the replicated regions held here
  TensorParallelLayers layers(world(), sp);
  auto per_layer = [&](bool recompute) {
    auto saved = [&](int64_t L) {
      nn::GPTConfig config = activation_model(t, T, C, NH, L);
      config.recompute = recompute;
      return saved_after_forward(layers, config, B);
    };
    return saved(3) - saved(2);
  };
  const std::string what = "tp " + std::to_string(t) + (sp ? " with" : " without") + " sequence parallelism";
  const int64_t measured = per_layer(false);
  const int64_t formula = plan::activation_bytes_per_layer(B, T, C, NH, t, sp);
  EXPECT_NEAR(static_cast<double>(measured), static_cast<double>(formula), 0.10 * static_cast<double>(formula)) << what;
  RecordProperty("activation_bytes_per_layer", std::to_string(measured));
  // A recomputed block keeps only its input, this rank's chunk under sequence parallelism.
  EXPECT_EQ(per_layer(true), 4 * B * Tr * C) << "recompute, " << what;

  // Mixed precision: every layer keeps bf16 copies, the tensor-parallel Linears (their inputs,
  // under sequence parallelism this rank's chunk) among them, and no probabilities
  // (plan::bf16_activation_bytes_per_layer): half the fp32 bytes but for the probabilities
  // (NH B T^2 / t values), of which only the rows' fp32 log-sum-exp is kept (NH B T / t), and the
  // LayerNorm statistics (4 B Tr values), which stay fp32.
  const kernels::PrecisionScope bf16(kernels::Precision::BF16);
  const int64_t measured_bf16 = per_layer(false);
  const int64_t formula_bf16 = plan::bf16_activation_bytes_per_layer(B, T, C, NH, t, sp);
  EXPECT_NEAR(static_cast<double>(measured_bf16), static_cast<double>(formula_bf16),
              0.10 * static_cast<double>(formula_bf16))
      << "bf16, " << what;
  const int64_t fp32_stats = 4 * 4 * B * Tr, probabilities = 4 * NH * B * T * T / t;
  const double half = 0.5 * static_cast<double>(measured - probabilities - fp32_stats);
  EXPECT_NEAR(static_cast<double>(measured_bf16 - fp32_stats), half, 0.10 * half) << "bf16 against fp32, " << what;
  RecordProperty("bf16_activation_bytes_per_layer", std::to_string(measured_bf16));
  EXPECT_EQ(per_layer(true), 2 * B * Tr * C) << "bf16 recompute, " << what;
}

// A mixture of experts' layer (dropless, top-2 of 4 experts, every block) against the dense one:
// the measured difference of one more layer's saved activations equals
// plan::moe_extra_activation_bytes_per_layer to the byte (the dispatch plan's counts included:
// without them 32 bytes a layer short), in fp32 and in bf16, with and without sequence
// parallelism (without it every tp rank routes every token).
TEST_P(ActivationMemory, MixtureOfExpertsLayerMatchesTheFormula) {
  const bool sp = GetParam();
  const int64_t t = world().size();
  if (sp && t == 1) GTEST_SKIP() << "sequence parallelism needs tp > 1";
  const int64_t B = 2, T = 8 * t, C = 16 * t, NH = 2 * t, E = 4, K = 2;
  TensorParallelLayers layers(world(), sp);
  auto per_layer = [&](int64_t experts) {
    auto saved = [&](int64_t L) {
      nn::GPTConfig config = activation_model(t, T, C, NH, L);
      config.moe.experts = experts;
      config.moe.top_k = K;
      return saved_after_forward(layers, config, B);
    };
    return saved(3) - saved(2);
  };
  for (const bool bf16 : {false, true}) {
    const kernels::PrecisionScope precision(bf16 ? kernels::Precision::BF16 : kernels::Precision::F32);
    const int64_t measured = per_layer(E) - per_layer(0);
    const int64_t formula = plan::moe_extra_activation_bytes_per_layer(B, T, C, t, sp, 1, E, K, bf16);
    const std::string what = std::string(bf16 ? "bf16" : "fp32") + ", tp " + std::to_string(t) +
                             (sp ? " with" : " without") + " sequence parallelism";
    EXPECT_EQ(measured, formula) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, ActivationMemory, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? std::string("sp") : std::string("plain"); });

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
