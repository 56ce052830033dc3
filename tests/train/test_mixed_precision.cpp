// bf16 mixed precision (train.precision = "bf16"): the GEMM path, the fp32 master weights,
// the once-per-step weight conversion, training that tracks fp32 and checkpoints that load
// across precisions. The PyTorch autocast oracle is in tests/oracle/test_pytorch_oracle.cpp,
// bit-exact bf16 resume in tests/train/test_trainer.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "loom/error.hpp"
#include "loom/kernels/matmul.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/nn/parameter.hpp"
#include "loom/optim/adamw.hpp"
#include "loom/train/trainer.hpp"
#include "test_util.hpp"
#include "train/tiny_run.hpp"

namespace loom::train {
namespace {

using kernels::Precision;
using kernels::PrecisionScope;
using kernels::Trans;

float round_bf16(float x) { return to_f32(to_bf16(x)); }

TEST(MixedPrecision, Bf16RoundsToNearestEven) {
  // Above 1.0 bf16 values are 2^-7 = 4/512 apart.
  EXPECT_EQ(round_bf16(1.0f), 1.0f);
  EXPECT_EQ(round_bf16(1.0f + 1.0f / 512), 1.0f);               // below halfway
  EXPECT_EQ(round_bf16(1.0f + 2.0f / 512), 1.0f);               // halfway: ties to even (down)
  EXPECT_EQ(round_bf16(1.0f + 6.0f / 512), 1.0f + 8.0f / 512);  // halfway: ties to even (up)
  EXPECT_EQ(round_bf16(1.0f + 3.0f / 512), 1.0f + 4.0f / 512);  // above halfway
  EXPECT_EQ(round_bf16(1.0f + 6e-4f), 1.0f);  // a step of lr 6e-4 is below bf16's resolution at 1
  EXPECT_TRUE(std::isnan(round_bf16(NAN)));
  EXPECT_EQ(round_bf16(INFINITY), INFINITY);
}

// A bf16 GEMM equals the fp32 GEMM of the bf16-rounded operands (fp32 accumulation), for both
// plain and transposed operands and with accumulation into C.
TEST(MixedPrecision, Bf16MatmulIsTheFp32ProductOfRoundedOperands) {
  const int64_t M = 37, N = 29, K = 53;
  std::vector<float> A = testing::random_vector(M * K, 1, -1, 1), B = testing::random_vector(K * N, 2, -1, 1);
  std::vector<float> Ar(A), Br(B);
  for (float& x : Ar) x = round_bf16(x);
  for (float& x : Br) x = round_bf16(x);
  for (Trans tb : {Trans::N, Trans::T}) {
    std::vector<float> want(M * N, 0.5f), got(M * N, 0.5f);
    kernels::matmul(Ar.data(), Trans::N, Br.data(), tb, want.data(), M, N, K, nullptr, /*accumulate=*/true);
    {
      const PrecisionScope bf16(Precision::BF16);
      kernels::matmul(A.data(), Trans::N, B.data(), tb, got.data(), M, N, K, nullptr, /*accumulate=*/true);
    }
    for (int64_t i = 0; i < M * N; ++i) EXPECT_NEAR(got[i], want[i], 1e-5f * (1 + std::fabs(want[i]))) << i;
    // And it is not the fp32 product of the unrounded operands.
    std::vector<float> exact(M * N, 0.5f);
    kernels::matmul(A.data(), Trans::N, B.data(), tb, exact.data(), M, N, K, nullptr, true);
    double diff = 0;
    for (int64_t i = 0; i < M * N; ++i) diff = std::max(diff, static_cast<double>(std::fabs(exact[i] - got[i])));
    EXPECT_GT(diff, 1e-4);
  }
}

// Batched products read strided views (attention's heads inside the QKV buffer, K^T by
// column strides) and write strided ones (a block of attention rows): the bf16 path copies
// them densely (oneDNN's AMX kernels take dense operands) and must keep every stride right,
// with and without accumulation into C.
TEST(MixedPrecision, Bf16BatchedMatmulOnStridedViews) {
  const int64_t b0 = 2, b1 = 3, M = 5, N = 7, K = 4, ldc = N + 3;
  // A: (b0, b1, M, K) inside a buffer padded by 2 columns; B^T stored as (b0, b1, N, K);
  // C: rows ldc apart.
  const std::array<int64_t, 4> a_strides{b1 * M * (K + 2), M * (K + 2), K + 2, 1};
  const std::array<int64_t, 4> b_strides{b1 * N * K, N * K, 1, K};  // (K, N) view of stored (N, K)
  const std::array<int64_t, 4> c_strides{b1 * M * ldc, M * ldc, ldc, 1};
  std::vector<float> A = testing::random_vector(b0 * b1 * M * (K + 2), 3, -1, 1), B = testing::random_vector(b0 * b1 * N * K, 4, -1, 1);
  for (bool accumulate : {false, true}) {
    kernels::BatchedMatmul d;
    d.batch0 = b0, d.batch1 = b1, d.M = M, d.N = N, d.K = K;
    d.a_strides = a_strides, d.b_strides = b_strides, d.c_strides = c_strides;
    d.alpha = 0.5f;
    d.accumulate = accumulate;
    std::vector<float> got(b0 * b1 * M * ldc, 2.0f);  // padding columns must stay 2
    {
      const PrecisionScope bf16(Precision::BF16);
      kernels::batched_matmul(d, A.data(), B.data(), got.data());
    }
    for (int64_t i = 0; i < b0; ++i)
      for (int64_t j = 0; j < b1; ++j)
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < ldc; ++n) {
            const float at = got[i * c_strides[0] + j * c_strides[1] + m * ldc + n];
            if (n >= N) {
              EXPECT_EQ(at, 2.0f) << "padding written";
              continue;
            }
            double want = accumulate ? 2.0 : 0.0;
            for (int64_t k = 0; k < K; ++k)
              want += 0.5 * static_cast<double>(round_bf16(A[i * a_strides[0] + j * a_strides[1] + m * a_strides[2] + k])) *
                      round_bf16(B[i * b_strides[0] + j * b_strides[1] + k + n * b_strides[3]]);
            EXPECT_NEAR(at, want, 1e-5) << i << " " << j << " " << m << " " << n << " accumulate " << accumulate;
          }
  }
}

// A parameter's bf16 copy is converted once per weights generation, not per GEMM, and an
// update of the master is seen only from the next generation (the next step) on.
TEST(MixedPrecision, WeightCopyIsConvertedOncePerGeneration) {
  nn::Parameter p("w", {2, 3}, true);
  p.value().fill_(1.5f);
  const PrecisionScope bf16(Precision::BF16);
  kernels::new_weights_generation();
  const kernels::Operand first = p.gemm_operand();
  ASSERT_EQ(first.dtype, DType::BF16);
  const auto* copy = static_cast<const bfloat16*>(first.data);
  EXPECT_EQ(to_f32(copy[0]), 1.5f);
  p.value().fill_(2.5f);  // within the step: the copy is not refreshed
  EXPECT_EQ(p.gemm_operand().data, first.data);
  EXPECT_EQ(to_f32(copy[0]), 1.5f);
  kernels::new_weights_generation();  // next step
  EXPECT_EQ(to_f32(static_cast<const bfloat16*>(p.gemm_operand().data)[5]), 2.5f);
  const PrecisionScope fp32(Precision::F32);
  EXPECT_EQ(p.gemm_operand().dtype, DType::F32);
}

// The optimizer writes each weight's bf16 copy in its update's pass: the next steps' GEMMs read
// the bf16 of the updated master without converting it again, and a write of the master by
// anything else (a checkpoint load, which calls weights_overwritten()) is seen at once.
TEST(MixedPrecision, OptimizerRefreshesTheWeightCopyInItsPass) {
  const PrecisionScope bf16(Precision::BF16);
  nn::Parameter w("w", {7, 5}, /*weight_decay=*/true);
  const auto init = testing::random_vector(w.numel(), 21);
  std::memcpy(w.value().f32(), init.data(), sizeof(float) * init.size());
  optim::AdamW opt({&w}, optim::AdamWConfig{});
  auto expect_copy_of_master = [&](const std::string& when) {
    const auto* copy = static_cast<const bfloat16*>(w.gemm_operand().data);
    for (int64_t i = 0; i < w.numel(); ++i)
      ASSERT_EQ(copy[i].bits, to_bf16(w.value().f32()[i]).bits) << when << ", element " << i;
  };
  for (int step = 0; step < 4; ++step) {
    kernels::new_weights_generation();  // the trainer's step start
    expect_copy_of_master("step " + std::to_string(step));
    opt.zero_grad();
    const auto g = testing::random_vector(w.numel(), 30 + step);
    std::memcpy(w.grad().f32(), g.data(), sizeof(float) * g.size());
    opt.step(1e-2f);
  }
  kernels::new_weights_generation();
  expect_copy_of_master("after the last step");
  EXPECT_EQ(w.bf16_conversions(), 1) << "converted at the first GEMM only, then refreshed by the optimizer";
  w.value().fill_(0.25f);  // a load into the live model
  kernels::weights_overwritten();
  expect_copy_of_master("after an overwrite");
  EXPECT_EQ(w.bf16_conversions(), 2);
}

// A checkpoint loaded into a live bf16 model after some steps: its GEMMs read the loaded
// masters' copies, not the copies the optimizer refreshed before the load (the same
// evaluation as a trainer freshly resumed from that checkpoint, bit for bit).
TEST(MixedPrecision, ALoadIntoALiveModelReplacesTheRefreshedCopies) {
  TrainConfig c = tiny_run("bf16_load_into_live");
  c.precision = "bf16";
  Trainer live(c, true);
  losses_of(live, 2);
  const std::string path = live.save_checkpoint_now();
  losses_of(live, 4);
  const float moved_on = live.evaluate();
  load_state(path, live.local_state(), c.optimizer);
  TrainConfig r = c;
  r.resume = "latest";
  Trainer resumed(r, true);
  ASSERT_EQ(resumed.step(), 2);
  const float loaded = live.evaluate();
  EXPECT_NE(loaded, moved_on);
  EXPECT_EQ(loaded, resumed.evaluate());
}

// The reason for fp32 master weights: AdamW's first step moves a weight by ~lr, 6e-4, below
// bf16's resolution at 1.0 (2^-7 = 0.0078), so a bf16 weight would stay at 1.0; the fp32
// master moves, and the bf16 copy follows once the accumulated change crosses a bf16 step.
TEST(MixedPrecision, SmallUpdatesMoveTheFp32Master) {
  const PrecisionScope bf16(Precision::BF16);
  nn::Parameter w("w", {1, 1}, /*weight_decay=*/false);
  w.value().f32()[0] = 1.0f;
  optim::AdamW opt({&w}, optim::AdamWConfig{0.9f, 0.95f, 1e-8f, 0.0f});
  int steps = 0;
  for (; steps < 20; ++steps) {
    kernels::new_weights_generation();
    w.gemm_operand();  // the step's bf16 copy
    opt.zero_grad();
    w.grad().f32()[0] = 1.0f;
    opt.step(6e-4f);
    if (steps == 0) {
      EXPECT_LT(w.value().f32()[0], 1.0f) << "the fp32 master did not move";
      EXPECT_NEAR(w.value().f32()[0], 1.0f - 6e-4f, 1e-6f);
      EXPECT_EQ(round_bf16(w.value().f32()[0]), 1.0f) << "a bf16 weight would not have moved";
    }
    kernels::new_weights_generation();
    if (to_f32(*static_cast<const bfloat16*>(w.gemm_operand().data)) != 1.0f) break;
  }
  // 1 - k * 6e-4 rounds below 1.0 in bf16 (step 2^-8 below 1) from k = 4 (1 - 0.0024 < 1 - 2^-9).
  EXPECT_EQ(steps + 1, 4) << "the bf16 copy should follow the master after the 4th step";
}

TEST(MixedPrecision, BadPrecisionIsAClearError) {
  TrainConfig c = tiny_run("bad_precision");
  c.precision = "fp16";
  try {
    c.validate();
    FAIL() << "fp16 was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "precision must be 'fp32' or 'bf16', got 'fp16'");
  }
}

TEST(MixedPrecision, SlowerWithoutBf16Instructions) {
  EXPECT_TRUE(kernels::bf16_slower_than_fp32(false, false));
  EXPECT_FALSE(kernels::bf16_slower_than_fp32(true, false));  // AVX512-BF16
  EXPECT_FALSE(kernels::bf16_slower_than_fp32(true, true));   // AMX
}

// The Shakespeare config (configs/shakespeare.toml: its optimizer, schedule and data) on a
// smaller model and batch so that the pair of 200-step runs takes ~10 s.
TrainConfig small_shakespeare(const std::string& name, const std::string& precision) {
  TrainConfig c = tiny_run(name);
  apply_toml_file(c, LOOM_SOURCE_DIR "/configs/shakespeare.toml");
  c.data = LOOM_SOURCE_DIR "/data/tinyshakespeare.txt";
  c.out_dir = "";
  c.model.n_layer = 2;
  c.model.n_embd = 64;
  c.model.block_size = 32;
  c.batch_size = 8;
  c.steps = 200;
  c.threads = 1;
  c.eval_batches = 8;
  c.peak_gflops = 100;
  c.precision = precision;
  return c;
}

// bf16 rounds every GEMM operand (relative error <= 2^-9); the runs stay together because
// both follow the same data and update the same kind of fp32 master. Measured: per-step loss
// within 0.28% relative, validation loss within 0.0012 nats; bounds (the issue's) 2% and 0.03.
// (With a 20-step warm-up instead of the config's 50 both runs spike at step 23 and the
// spike, amplified differently, breaks the 2%: the bound needs a stable recipe.)
TEST(MixedPrecision, Bf16TracksFp32OnShakespeare) {
  Trainer fp32(small_shakespeare("", "fp32"), true), bf16(small_shakespeare("", "bf16"), true);
  double worst = 0.0;
  int64_t worst_step = 0;
  for (int64_t s = 1; s <= 200; ++s) {
    const float a = fp32.train_step().loss, b = bf16.train_step().loss;
    const double rel = std::fabs(static_cast<double>(b) - a) / a;
    if (rel > worst) worst = rel, worst_step = s;
  }
  EXPECT_LT(worst, 0.02) << "worst at step " << worst_step;
  const float val_fp32 = fp32.evaluate(), val_bf16 = bf16.evaluate();
  EXPECT_NEAR(val_bf16, val_fp32, 0.03);
  EXPECT_LT(val_bf16, 2.9f) << "bf16 did not learn";
  std::printf("[bf16 vs fp32] worst per-step loss difference %.2e (step %lld); val loss %.4f vs %.4f\n", worst,
              static_cast<long long>(worst_step), val_bf16, val_fp32);
}

void expect_same_state(Trainer& a, Trainer& b) {
  const std::map<std::string, Tensor> want = a.state_dict(), got = b.state_dict();
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) EXPECT_EQ(0, std::memcmp(got.at(name).raw(), w.raw(), w.nbytes())) << name;
}

// A checkpoint written in one precision loads into the other: the state is the same fp32
// tensors, and the resumed run continues in its own precision.
TEST(MixedPrecision, CheckpointsLoadAcrossPrecisions) {
  for (const char* from : {"fp32", "bf16"}) {
    const std::string to = std::string(from) == "fp32" ? "bf16" : "fp32";
    TrainConfig c = tiny_run(std::string("cross_precision_") + from);
    c.precision = from;
    Trainer first(c, true);
    losses_of(first, 3);
    first.save_checkpoint_now();
    TrainConfig other = c;
    other.precision = to;
    other.resume = "latest";
    Trainer resumed(other, true);
    EXPECT_EQ(resumed.step(), 3);
    expect_same_state(first, resumed);  // the loaded masters and moments, bit for bit
    // It continues in its own precision: its next step's loss is that of a run in `to`
    // resumed from the same state, not of one in `from`.
    TrainConfig same = c;
    same.resume = "latest";
    Trainer continued(same, true);
    const float in_to = resumed.train_step().loss, in_from = continued.train_step().loss;
    EXPECT_NE(in_to, in_from) << from << " -> " << to;
    EXPECT_NEAR(in_to, in_from, 0.02 * in_from);
  }
}

}  // namespace
}  // namespace loom::train
