// Sharded data parallelism against the serial run: ZeRO stages 1-3 and hybrid sharding on
// 1..8 ranks, with and without gradient accumulation, must give the serial run's losses
// (relative 1e-5) and final parameters (relative 1e-4); each rank's model-state memory must
// match the ZeRO formula within 5%, during a step too (the units held whole are counted apart:
// test_zero_gathered.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <string>
#include <tuple>

#include "comm/mpi_test_env.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/nn/layer_norm.hpp"
#include "loom/nn/linear.hpp"
#include "loom/nn/moe.hpp"
#include "loom/plan/memory_model.hpp"
#include "loom/plan/moe_cost.hpp"
#include "loom/plan/step_time.hpp"
#include "loom/train/checkpoint.hpp"
#include "loom/train/checkpoint_manifest.hpp"
#include "loom/train/trainer.hpp"
#include "parallel/equivalence.hpp"
#include "test_util.hpp"

namespace loom::parallel {
namespace {

using loom::testing::world;
using namespace loom::testing::equivalence;

struct ZeroCase {
  int stage;
  std::string algorithm;
  int64_t micro_batches;
};

void PrintTo(const ZeroCase& z, std::ostream* os) {
  *os << "zero " << z.stage << " (" << z.algorithm << ", " << z.micro_batches << " micro-batches)";
}

class ZeroEquivalence : public ::testing::TestWithParam<ZeroCase> {};

TEST_P(ZeroEquivalence, SameLossesAndParametersAsSerial) {
  const ZeroCase z = GetParam();
  const int p = world().size();
  const TrainingRun& want = serial_run(tiny(1, 2 * p, z.micro_batches));
  train::TrainConfig c = tiny(p, 2, z.micro_batches);
  c.zero = z.stage;
  c.allreduce = z.algorithm;
  train::Trainer sharded(c, true, &world());
  ASSERT_NE(sharded.sharded(), nullptr);
  EXPECT_EQ(sharded.sharded()->unit_count(), c.model.n_layer + 1);  // one per block + the root
  expect_equivalent(run(sharded), want, c,
                    "zero " + std::to_string(z.stage) + " on " + std::to_string(p) + " ranks (" + z.algorithm + ", " +
                        std::to_string(z.micro_batches) + " micro-batches)");
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroEquivalence,
                         ::testing::Values(ZeroCase{1, "mpi", 1}, ZeroCase{2, "mpi", 1}, ZeroCase{3, "mpi", 1},
                                           ZeroCase{1, "ring", 1}, ZeroCase{2, "ring", 1}, ZeroCase{3, "ring", 1},
                                           ZeroCase{1, "mpi", 3}, ZeroCase{2, "mpi", 3}, ZeroCase{3, "mpi", 3}),
                         [](const auto& info) {
                           return "zero" + std::to_string(info.param.stage) + "_" + info.param.algorithm + "_mb" +
                                  std::to_string(info.param.micro_batches);
                         });

class HsdpEquivalence : public ::testing::TestWithParam<int> {};

TEST_P(HsdpEquivalence, ShardInPairsReplicateAcrossPairs) {
  const int p = world().size();
  if (p < 4 || p % 2 != 0) GTEST_SKIP() << "HSDP needs at least two groups of 2 ranks";
  const TrainingRun& want = serial_run(tiny(1, 2 * p, 2));
  train::TrainConfig c = tiny(p, 2, 2);
  c.zero = GetParam();
  c.hsdp_shard = 2;
  train::Trainer hsdp(c, true, &world());
  expect_equivalent(run(hsdp), want, c, "HSDP 2 x " + std::to_string(p / 2) + " zero " + std::to_string(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Stages, HsdpEquivalence, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return "zero" + std::to_string(info.param); });

class ZeroMemory : public ::testing::TestWithParam<int> {};

TEST_P(ZeroMemory, ModelStateMatchesTheFormulaPlusDeclaredBuffers) {
  const int stage = GetParam();
  const int p = world().size();
  MemoryTracker& m = MemoryTracker::instance();
  auto state = [&](MemoryCategory c) { return m.current(c); };
  const int64_t params0 = state(MemoryCategory::Parameters), grads0 = state(MemoryCategory::Gradients),
                opt0 = state(MemoryCategory::OptimizerState);
  train::TrainConfig c = tiny(p, 2, 1);
  c.model.n_layer = 4;
  c.model.n_embd = 32;
  c.zero = stage;
  train::Trainer t(c, true, &world());
  m.reset_peaks();
  const int64_t peak_params0 = m.peak(MemoryCategory::Parameters), peak_grads0 = m.peak(MemoryCategory::Gradients);
  t.train_step();
  t.train_step();
  const plan::StateBytes want = plan::model_state_bytes(t.model().num_parameters(), p, stage, 8);
  const std::string what = "zero " + std::to_string(stage) + " on " + std::to_string(p) + " ranks: ";
  auto expect_near = [&](int64_t got, int64_t formula, const std::string& name) {
    EXPECT_NEAR(static_cast<double>(got), static_cast<double>(formula), 0.05 * static_cast<double>(formula))
        << what << name << " measured " << got << " bytes, formula " << formula;
  };
  // Between steps no unit is gathered and no full gradient is held (stages 2-3).
  expect_near(state(MemoryCategory::Parameters) - params0, want.params, "parameters");
  expect_near(state(MemoryCategory::Gradients) - grads0, want.grads, "gradients");
  expect_near(state(MemoryCategory::OptimizerState) - opt0, want.optimizer, "optimizer state");
  // During a step parameters and gradients stay the formula's: what the units hold whole is the
  // gathered category's (test_zero_gathered.cpp holds its peak to the memory check's count).
  const ShardedDataParallel& z = *t.sharded();
  EXPECT_LE(m.peak(MemoryCategory::Parameters) - peak_params0, static_cast<int64_t>(0.05 * want.params))
      << what << "peak parameters beyond the sharded state";
  EXPECT_LE(m.peak(MemoryCategory::Gradients) - peak_grads0, static_cast<int64_t>(0.05 * want.grads))
      << what << "peak gradients beyond the sharded state";
  EXPECT_EQ(m.peak(MemoryCategory::Gathered) > 0, stage >= 2) << what << "units held whole in a step";
  if (stage == 3) {
    EXPECT_GT(z.gathers(), 0);
    EXPECT_GT(z.prefetched_gathers(), 0) << "the next unit's gather should start before it is needed";
  }
  RecordProperty("memory_report", t.memory_report());
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroMemory, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return "zero" + std::to_string(info.param); });

// Mixed precision's model state (plan/mixed_precision_cost.hpp) against the memory tracker,
// between steps (no unit gathered, no full gradient held): exact for DDP (a bf16 copy of what
// the GEMMs read, none of the LayerNorms, biases and position table: the formula once gave those
// one too, 1% over here), within 2% for ZeRO 1-3 (the formula counts Psi/N where the shards hold
// units padded to a multiple of N).
class MixedPrecisionMemory : public ::testing::TestWithParam<int> {};

TEST_P(MixedPrecisionMemory, TrackerMeasuresTheFormula) {
  const int stage = GetParam();
  const int p = world().size();
  if (stage == 0 && p > 1) GTEST_SKIP() << "DDP's row runs on one rank";  // (the same state on any)
  MemoryTracker& m = MemoryTracker::instance();
  const int64_t params0 = m.current(MemoryCategory::Parameters), grads0 = m.current(MemoryCategory::Gradients),
                opt0 = m.current(MemoryCategory::OptimizerState);
  train::TrainConfig c = tiny(p, 2, 1);
  c.model.n_layer = 4;
  c.model.n_embd = 32;
  c.zero = stage;
  c.precision = "bf16";
  train::Trainer t(c, true, &world());
  t.train_step();
  t.train_step();
  const plan::StateBytes want = t.state_formula();
  const std::string what = "bf16, zero " + std::to_string(stage) + " on " + std::to_string(p) + " ranks: ";
  auto expect_near = [&](int64_t got, int64_t formula, const std::string& name) {
    if (stage == 0) {
      EXPECT_EQ(got, formula) << what << name;
    }
    EXPECT_NEAR(static_cast<double>(got), static_cast<double>(formula), 0.02 * static_cast<double>(formula))
        << what << name << " measured " << got << " bytes, formula " << formula;
  };
  expect_near(m.current(MemoryCategory::Parameters) - params0, want.params, "parameters");
  expect_near(m.current(MemoryCategory::Gradients) - grads0, want.grads, "gradients");
  expect_near(m.current(MemoryCategory::OptimizerState) - opt0, want.optimizer, "optimizer state");
}

INSTANTIATE_TEST_SUITE_P(Stages, MixedPrecisionMemory, ::testing::Values(0, 1, 2, 3),
                         [](const auto& info) { return "zero" + std::to_string(info.param); });

// The same for a mixture of experts (one rank, no ZeRO), exact: the stacked expert weights get
// their bf16 copy once a step like any GEMM weight (the formula's 2 bytes), and the router, kept
// in fp32, none, nor the experts' biases. Converting the experts' weights per GEMM instead would
// leave the parameters 2 bytes a weight short of the formula (here 28%).
TEST(MixedPrecisionMoeMemory, TrackerMeasuresTheFormula) {
  if (world().size() > 1) GTEST_SKIP() << "one rank's state";
  MemoryTracker& m = MemoryTracker::instance();
  const int64_t params0 = m.current(MemoryCategory::Parameters);
  train::TrainConfig c = tiny(1, 2, 1);
  c.model.n_layer = 2;
  c.model.n_embd = 32;
  c.model.moe.experts = 4;
  c.model.moe.top_k = 2;
  c.precision = "bf16";
  train::Trainer t(c, true, &world());
  t.train_step();
  t.train_step();
  EXPECT_EQ(m.current(MemoryCategory::Parameters) - params0, t.state_formula().params);
}

// The bf16 ZeRO run the checkpoint tests below share: 6 steps, the decay over them.
train::TrainConfig bf16_six_steps(int ranks, int stage) {
  train::TrainConfig c = tiny(ranks, 2, 1);
  c.steps = 6;
  c.decay_steps = 6;
  c.warmup_steps = 2;  // before decay_steps, as the config requires
  c.zero = stage;
  c.precision = "bf16";
  return c;
}

// c resumed from dir's step-3 checkpoint ends as the straight run `want` did, bit for bit.
void expect_resume_at_3_continues(const train::TrainConfig& c, const std::string& dir, const TrainingRun& want) {
  train::TrainConfig resumed = c;
  resumed.resume = dir;
  train::Trainer again(resumed, true, &world());
  ASSERT_EQ(again.step(), 3);
  const std::vector<float> losses = run(again).losses;
  EXPECT_EQ(losses, std::vector<float>(want.losses.end() - 3, want.losses.end()));
}

TEST(ZeroCheckpoint, Bf16GathersResumeBitExactly) {
  // With bf16 gathers the fp32 master exists only as shards (ZeRO-2 here): the checkpoint holds
  // them, and a resumed run rebuilds the bf16 weights from them exactly as the straight run had.
  const int p = world().size();
  const std::string dir = fresh_shared_dir("loom_zero_bf16_checkpoint", world());
  const train::TrainConfig c = bf16_six_steps(p, 2);
  train::Trainer straight(c, true, &world());
  const TrainingRun want = run(straight);
  train_and_checkpoint(c, 3, dir, world());
  expect_resume_at_3_continues(c, dir, want);
  remove_shared_dir(dir, world());
}

// The same with expert parallelism: ZeRO leaves the experts whole (replicas over expert_dp),
// so the checkpoint takes their fp32 values from the model itself, beside the dense shards.
// Stages 1-2 with bf16 gathers once left them out of the pieces a rank saves and loads: a
// sharded checkpoint held no expert weights (another layout's resume could not find them) and
// a resume under the same layout, from either format, silently kept the experts' initial values.
class ZeroExpertCheckpoint : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(ZeroExpertCheckpoint, Bf16GathersResumeBitExactly) {
  const int p = world().size();
  if (p % 2 != 0) GTEST_SKIP() << "ep 2 needs an even number of ranks";
  const auto [stage, format] = GetParam();
  const std::string dir = fresh_shared_dir("loom_zero_bf16_moe_checkpoint", world());
  train::TrainConfig c = bf16_six_steps(p, stage);
  c.model.moe.experts = 4;
  c.ep = 2;
  c.checkpoint_format = format;
  train::Trainer straight(c, true, &world());
  const TrainingRun want = run(straight);
  train_and_checkpoint(c, 3, dir, world());
  if (format == "sharded") {
    const std::string saved = train::resolve_checkpoint_path(dir);
    const train::Manifest manifest = train::read_manifest(saved);
    EXPECT_TRUE(manifest.tensors.count("model.blocks.0.moe.experts.fc_weight")) << saved << " holds no expert weights";
  }
  expect_resume_at_3_continues(c, dir, want);
  remove_shared_dir(dir, world());
}

INSTANTIATE_TEST_SUITE_P(StagesAndFormats, ZeroExpertCheckpoint,
                         ::testing::Combine(::testing::Values(1, 2, 3), ::testing::Values("sharded", "single")),
                         [](const auto& info) {
                           return "zero" + std::to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
                         });

// ZeRO-2/3 under a pipeline (dp 2 x pp 2, interleaved chunks, 4 micro-batches): each chunk's
// root unit and the end stages' token tables in units of their own are what the checkpoint
// holds, so a resume under the same layout, from either format, continues bit for bit, in
// fp32 and in bf16 (whose fp32 master lives only as shards).
class ZeroPipelineCheckpoint : public ::testing::TestWithParam<std::tuple<int, std::string, std::string>> {};

TEST_P(ZeroPipelineCheckpoint, ResumesBitExactly) {
  if (world().size() != 4) GTEST_SKIP() << "runs on 4 ranks (dp 2 x pp 2)";
  const auto [stage, precision, format] = GetParam();
  const std::string dir = fresh_shared_dir("loom_zero_pipeline_checkpoint", world());
  train::TrainConfig c = bf16_six_steps(2, stage);
  c.precision = precision;
  c.checkpoint_format = format;
  c.pp = 2;
  c.schedule = "interleaved";
  c.chunks = 2;
  c.model.n_layer = 4;
  c.micro_batches = 4;
  c.batch_size = 4;
  train::Trainer straight(c, true, &world());
  const TrainingRun want = run(straight);
  train_and_checkpoint(c, 3, dir, world());
  expect_resume_at_3_continues(c, dir, want);
  remove_shared_dir(dir, world());
}

INSTANTIATE_TEST_SUITE_P(StagesPrecisionsAndFormats, ZeroPipelineCheckpoint,
                         ::testing::Values(std::tuple{2, "fp32", "sharded"}, std::tuple{3, "bf16", "sharded"},
                                           std::tuple{3, "fp32", "single"}),
                         [](const auto& info) {
                           return "zero" + std::to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param) +
                                  "_" + std::get<2>(info.param);
                         });

// ZeRO-2/3's traffic under a pipeline (dp 2 x pp 2, 4 micro-batches, every unit a multiple of
// 2 elements: no padding), as the planner prices it (plan::zero_bytes_per_step) against the
// shard and gather groups' counters over a warm step, on the rank moving the most (the first
// stage): each micro-batch reduce-scatters every unit; stage 3 gathers each block before its
// forward and its backward and a chunk's root unit (token and position tables) once a
// micro-batch, whatever the schedule, or every unit once a step (zero3_reshard = "step"); stage 2
// gathers the updated parameters once after the step. The planner once
// gave every stage 1/pp of the whole model's tables and final LayerNorm as its root
// (ZeRO-3: 406784 bytes for the first stage's 388608, every schedule).
TEST(ZeroPipelineBytes, ReduceScattersAndGathersEqualThePlannersCount) {
  if (world().size() != 4) GTEST_SKIP() << "runs on 4 ranks (dp 2 x pp 2)";
  for (const int stage : {2, 3, 4})  // 4: ZeRO-3 gathering each unit once a step
    for (const std::string schedule : {"1f1b", "gpipe", "interleaved"}) {
      train::TrainConfig c = tiny(2, 4, 4);
      c.zero = std::min(stage, 3);
      if (stage == 4) c.zero3_reshard = "step";
      c.pp = 2;
      c.schedule = schedule;
      c.chunks = schedule == "interleaved" ? 2 : 1;
      c.model.n_layer = 4;
      c.model.padded_vocab_size = 128;  // the planner's token table
      train::Trainer t(c, true, &world());
      ShardedDataParallel& z = *t.sharded();
      t.train_step();
      z.reset_comm_stats();
      t.train_step();
      float most = static_cast<float>(z.comm_stats().bytes);
      world().all_reduce(&most, 1, comm::ReduceOp::Max);
      const plan::ModelSpec m{"gpt", c.model.n_layer, c.model.n_embd, c.model.n_head, c.model.block_size,
                              c.model.padded_vocab_size};
      plan::Layout l;
      l.dp = 2;
      l.pp = 2;
      l.chunks = c.chunks;
      l.gpipe = schedule == "gpipe";
      l.zero = static_cast<int>(c.zero);
      l.zero3_reshard_per_step = stage == 4;
      l.micro_batch = c.batch_size / c.micro_batches;
      l.recompute = false;
      l.sequence_parallel = false;
      const plan::ZeroBytes want =
          plan::zero_bytes_per_step(m, l, c.micro_batches, plan::dense_parameters_per_device(m, l), 4, 4);
      // and the gradient norm's one float over the shard group
      const std::string what = "zero " + std::to_string(c.zero) + " (" + c.zero3_reshard + "), " + schedule;
      EXPECT_EQ(static_cast<int64_t>(most), want.total() + 4) << what;
      // Kept for the step, every unit is gathered once (after the optimizer step, which freed them).
      if (stage == 4) {
        EXPECT_EQ(z.gathers(), z.unit_count()) << what;
      }
    }
}

// Mixed precision's traffic, as the bytes counters (whole tensors, comm::CommStats) see one
// step: the gradient is reduce-scattered in grad_reduce_dtype (4 or 2 bytes an element) and
// the parameters all-gathered in bf16 (2), over Psi elements padded to a multiple of N. Stages
// 1-2 gather once after the step: (4 + 2) Psi, the 6 Psi (N - 1) / N a ring sends per rank in
// place of fp32's 8 Psi (N - 1) / N; with a bf16 reduce, 4 Psi. Stage 3 gathers each block
// before its forward and again before its backward, the root unit once. The gradient norm
// adds one fp32 all-reduce of 1 float. A mixture of experts' routers are kept in fp32: their
// weights form units of their own, gathered at 4 bytes an element (Psi_k of them: stages 1-2
// move (4 + 2) (Psi - Psi_k) + 8 Psi_k), each padded to a multiple of N.
struct WireCase {
  int stage;
  std::string reduce;
  bool moe = false;
};

void PrintTo(const WireCase& w, std::ostream* os) {
  *os << "zero " << w.stage << " reduce " << w.reduce << (w.moe ? " moe" : "");
}

class ZeroWireBytes : public ::testing::TestWithParam<WireCase> {};

TEST_P(ZeroWireBytes, CountersEqualTheMixedPrecisionFormula) {
  const WireCase w = GetParam();
  const int64_t p = world().size();
  train::TrainConfig c = tiny(p, 2, 1);
  c.zero = w.stage;
  c.precision = "bf16";
  c.grad_reduce_dtype = w.reduce;
  if (w.moe) {
    c.model.moe.experts = 4;  // top-2 in both blocks
    c.model.moe.top_k = 2;
  }
  train::Trainer t(c, true, &world());
  ShardedDataParallel& z = *t.sharded();
  t.train_step();
  z.reset_comm_stats();
  t.train_step();
  int64_t psi = 0, gathered_bf16 = 0, gathered_fp32 = 0, kept = 0;
  for (const ShardedDataParallel::UnitLayout& u : z.unit_layouts()) {
    const int64_t padded = (u.numel + p - 1) / p * p;
    EXPECT_EQ(u.padded_numel, padded);
    psi += padded;
    const int64_t gathers = w.stage == 3 && !u.root ? 2 : 1;
    (u.gathered_in_bf16 ? gathered_bf16 : gathered_fp32) += gathers * padded;
    if (!u.gathered_in_bf16) kept += u.numel;
  }
  // Exactly the routers' weights (E x C in each MoE block) are gathered in fp32.
  EXPECT_EQ(kept, w.moe ? c.model.n_layer * 4 * c.model.n_embd : 0);
  const int64_t reduce_bytes = w.reduce == "bf16" ? 2 : 4;
  const int64_t want = reduce_bytes * psi + 2 * gathered_bf16 + 4 * gathered_fp32 + 4;
  EXPECT_EQ(z.comm_stats().bytes, want) << "zero " << w.stage << ", reduce " << w.reduce << (w.moe ? ", moe" : "")
                                        << " on " << p << " ranks: Psi (padded) " << psi;
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroWireBytes,
                         ::testing::Values(WireCase{1, "fp32"}, WireCase{1, "bf16"}, WireCase{2, "fp32"},
                                           WireCase{3, "fp32"}, WireCase{3, "bf16"}, WireCase{1, "fp32", true},
                                           WireCase{2, "bf16", true}, WireCase{3, "fp32", true}),
                         [](const auto& info) {
                           return "zero" + std::to_string(info.param.stage) + "_reduce_" + info.param.reduce +
                                  (info.param.moe ? "_moe" : "");
                         });

// A block as a mixture of experts' starts: a LayerNorm (gathered in bf16, widened) then a router
// whose weight is kept in fp32; the root's own LayerNorm after it. Its forward runs no bf16 GEMM.
class RouterBlock : public nn::Module {
 public:
  explicit RouterBlock(int64_t C) {
    ln = &register_module("ln", std::make_unique<nn::LayerNorm>(C));
    router = &register_module("router", std::make_unique<nn::Linear>(C, C, /*bias=*/false));
    router->weight().set_kept_in_fp32(true);
  }
  nn::LayerNorm* ln;
  nn::Linear* router;

 protected:
  Tensor forward_impl(const Tensor& x, nn::Context& ctx) override { return router->forward(ln->forward(x, ctx), ctx); }
  Tensor backward_impl(const Tensor& dy, nn::Context& ctx) override { return ln->backward(router->backward(dy, ctx), ctx); }
};

class RouterModel : public nn::Module {
 public:
  explicit RouterModel(int64_t C) {
    block = &register_module("block", std::make_unique<RouterBlock>(C));
    ln_f = &register_module("ln_f", std::make_unique<nn::LayerNorm>(C));
  }
  RouterBlock* block;
  nn::LayerNorm* ln_f;

 protected:
  Tensor forward_impl(const Tensor& x, nn::Context& ctx) override { return ln_f->forward(block->forward(x, ctx), ctx); }
  Tensor backward_impl(const Tensor& dy, nn::Context& ctx) override { return block->backward(ln_f->backward(dy, ctx), ctx); }
};

// Element k of a master that no bf16 value equals: 1 + (k + 1) 1.00001e-3.
float master_value(int64_t k) { return 1.0f + static_cast<float>(k + 1) * 1.00001e-3f; }

// The unit split itself, on any CPU (no bf16 GEMM runs): under bf16 gathers the router's weight
// forms a unit of its own, gathered in fp32 and read bit-equal to its master in every stage,
// while the LayerNorm beside it reads its master rounded to bf16; the gathers' bytes count the
// kept unit at 4 bytes an element and the others at 2. In fp32 a block stays one unit.
class ZeroKeptUnits : public ::testing::TestWithParam<int> {};

TEST_P(ZeroKeptUnits, KeptParameterGatheredInFp32OthersInBf16) {
  const int stage = GetParam();
  const int64_t p = world().size(), C = 6;  // units of 12 and 36 elements, padded apart
  const kernels::PrecisionScope bf16(kernels::Precision::BF16);
  {
    RouterModel fp32_model(C);
    ShardedDataParallel fp32(fp32_model, world(), nullptr, ZeroOptions{.stage = stage, .units = {fp32_model.block}});
    EXPECT_EQ(fp32.unit_count(), 2) << "without bf16 gathers a block is one unit";
  }
  RouterModel model(C);
  ShardedDataParallel z(model, world(), nullptr,
                        ZeroOptions{.stage = stage, .units = {model.block}, .gather_in_bf16 = true});
  ASSERT_EQ(z.unit_count(), 3);  // the block's bf16 and fp32 units, the root's
  const std::vector<ShardedDataParallel::UnitLayout> units = z.unit_layouts();
  EXPECT_EQ(units[0].numel, 2 * C);
  EXPECT_TRUE(units[0].gathered_in_bf16);
  EXPECT_EQ(units[1].numel, C * C);
  EXPECT_FALSE(units[1].gathered_in_bf16);
  EXPECT_TRUE(units[2].root && units[2].gathered_in_bf16 && !units[1].root);
  // A step's worth of new masters, written where the optimizer would: this rank's pieces.
  for (const ShardedDataParallel::ShardPiece& piece : z.shard_pieces())
    for (int64_t j = 0; j < piece.shard->numel(); ++j) piece.shard->value().f32()[j] = master_value(piece.param_offset + j);

  nn::Parameter& router = model.block->router->weight();
  nn::Parameter& gain = model.block->ln->weight();
  std::vector<float> router_read, gain_read;
  z.reset_comm_stats();
  if (stage < 3) {
    z.after_optimizer_step();  // the gathers after a step
    router_read.assign(router.value().f32(), router.value().f32() + router.numel());
    gain_read.assign(gain.value().f32(), gain.value().f32() + gain.numel());
  } else {
    model.block->router->add_pre_forward_hook([&](nn::Module&, nn::Context&) {  // the block's units gathered
      router_read.assign(router.value().f32(), router.value().f32() + router.numel());
      gain_read.assign(gain.value().f32(), gain.value().f32() + gain.numel());
    });
    nn::Context ctx;
    Tensor x = Tensor::empty({1, 2, C});
    for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = static_cast<float>(i % 5) - 2.0f;
    model.forward(x, ctx);
  }
  ASSERT_EQ(router_read.size(), static_cast<size_t>(C * C));
  ASSERT_EQ(gain_read.size(), static_cast<size_t>(C));
  for (int64_t k = 0; k < C * C; ++k) ASSERT_EQ(router_read[k], master_value(k)) << "router element " << k;
  for (int64_t k = 0; k < C; ++k) {
    ASSERT_EQ(gain_read[k], to_f32(to_bf16(master_value(k)))) << "LayerNorm gain element " << k;
    ASSERT_NE(gain_read[k], master_value(k)) << "LayerNorm gain element " << k << " is a bf16 value: the check above shows nothing";
  }
  // One gather of each unit: 2 bytes an element for the bf16 ones, 4 for the router's.
  const auto padded = [p](int64_t n) { return (n + p - 1) / p * p; };
  EXPECT_EQ(z.comm_stats().bytes, 2 * padded(2 * C) + 4 * padded(C * C) + 2 * padded(2 * C));
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroKeptUnits, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return "zero" + std::to_string(info.param); });

// Under bf16 gathers a router's weight (nn::Parameter::kept_in_fp32) is gathered in fp32: what
// the next forward reads is bit-equal to the fp32 master the optimizer updated, in every stage,
// while a LayerNorm gain of the same block reads its master rounded to bf16 (after one step of
// lr 5e-4 from 1.0 its master is no bf16 value, so the check on the router can tell the two apart).
class ZeroKeptInFp32 : public ::testing::TestWithParam<int> {};

TEST_P(ZeroKeptInFp32, RouterWeightGatheredBitEqualToItsMaster) {
  const int p = world().size();
  train::TrainConfig c = tiny(p, 2, 1);
  c.zero = GetParam();
  c.precision = "bf16";
  c.model.moe.experts = 4;
  c.model.moe.top_k = 2;
  train::Trainer t(c, true, &world());
  const std::string router_name = "blocks.1.moe.router.weight", gain_name = "blocks.1.ln2.weight";
  nn::MoE* moe = nullptr;
  for (nn::Module* child : t.model().children())
    for (nn::Module* m : child->children())
      if (auto* found = dynamic_cast<nn::MoE*>(m); found != nullptr && found->router().weight().name() == router_name)
        moe = found;
  ASSERT_NE(moe, nullptr);
  EXPECT_TRUE(moe->router().weight().kept_in_fp32());
  nn::Parameter* gain = nullptr;
  for (nn::Parameter* q : t.model().parameters())
    if (q->name() == gain_name) gain = q;
  ASSERT_NE(gain, nullptr);
  // What the forward reads, inside the block (under ZeRO-3 while its units are gathered).
  std::vector<float> router_read, gain_read;
  moe->add_pre_forward_hook([&](nn::Module&, nn::Context&) {
    const Tensor& r = moe->router().weight().value();
    router_read.assign(r.f32(), r.f32() + r.numel());
    gain_read.assign(gain->value().f32(), gain->value().f32() + gain->numel());
  });
  t.train_step();
  std::map<std::string, Tensor> masters = t.state_dict();  // the fp32 masters, gathered from the shards
  const Tensor& router_master = masters.at("model." + router_name);
  const Tensor& gain_master = masters.at("model." + gain_name);
  t.train_step();
  ASSERT_EQ(router_read.size(), static_cast<size_t>(router_master.numel()));
  ASSERT_EQ(gain_read.size(), static_cast<size_t>(gain_master.numel()));
  int64_t router_differs = 0, gain_not_rounded = 0, gain_moved = 0;
  for (int64_t i = 0; i < router_master.numel(); ++i) router_differs += router_read[i] != router_master.f32()[i];
  for (int64_t i = 0; i < gain_master.numel(); ++i) {
    const float master = gain_master.f32()[i];
    gain_not_rounded += gain_read[i] != to_f32(to_bf16(master));
    gain_moved += gain_read[i] != master;
  }
  EXPECT_EQ(router_differs, 0) << "router weight elements the forward read other than the fp32 master";
  EXPECT_EQ(gain_not_rounded, 0) << "LayerNorm gain elements not read as the bf16-rounded master";
  EXPECT_GT(gain_moved, 0) << "the LayerNorm gain's master should not be a bf16 value after a step";
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroKeptInFp32, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return "zero" + std::to_string(info.param); });

TEST(ZeroCheckpoint, ResumesUnderAnotherLayoutAndSerially) {
  // ZeRO-3 saves in the serial layout; a ZeRO-1 run and a serial run resumed from that file
  // must continue exactly like the uninterrupted ZeRO-3 run.
  const int p = world().size();
  const std::string dir = fresh_shared_dir("loom_zero_checkpoint", world());
  train::TrainConfig c = tiny(p, 2, 1);
  c.steps = 10;
  c.decay_steps = 10;  // the same schedule for the 5-step first half
  c.warmup_steps = 2;  // before decay_steps, as the config requires
  c.zero = 3;
  train::Trainer straight(c, true, &world());
  const TrainingRun want = run(straight);
  const std::vector<float> last_five(want.losses.end() - 5, want.losses.end());

  train_and_checkpoint(c, 5, dir, world());

  train::TrainConfig resumed = c;
  resumed.zero = 1;
  resumed.resume = dir;
  train::Trainer zero1(resumed, true, &world());
  EXPECT_EQ(zero1.step(), 5);
  expect_equivalent({run(zero1).losses, {}, {}}, {last_five, {}, {}}, c, "ZeRO-1 resumed from ZeRO-3");

  train::TrainConfig serial_config = tiny(1, 2 * p, 1);
  serial_config.steps = 10;
  serial_config.decay_steps = 10;
  serial_config.warmup_steps = 2;  // before decay_steps, as the config requires
  serial_config.resume = dir;
  train::Trainer serial(serial_config, true);  // every rank on its own, from rank 0's file
  const TrainingRun continued = run(serial);
  expect_equivalent(continued, {last_five, want.names, want.params}, c, "serial resumed from ZeRO-3");
  remove_shared_dir(dir, world());
}

}  // namespace
}  // namespace loom::parallel
