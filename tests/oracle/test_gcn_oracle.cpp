// Loom's GCN against PyTorch: the test trains a 3-layer GCN on a small R-MAT graph through
// the trainer (the GcnSpec behind the model seam), writes Â (dense), the features, the
// training targets and the initial weights; tests/oracle/gcn_reference.py rebuilds the model
// the usual way in float64 and writes back the loss, every gradient, 10 Adam steps' losses
// and the parameters after them. Widths 12 -> 16 -> 16 -> 4 exercise both GraphConv orders
// (aggregate first where in <= out, transform first in the last layer) and the L2 term.
// Tolerances: the loss and every gradient within 1e-5 relative (max|loom - torch| <= 1e-5 ·
// max|torch|, fp32 sums over at most a few hundred terms), the 10 losses within 1e-5
// relative, the final parameters within 1e-4 · max|torch| (Adam's normalised steps amplify
// fp32 gradient rounding where a gradient is near zero). Dropout is 0 here: its masks are
// tested in tests/kernels and by the exact resume.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "loom/kernels/sparse.hpp"
#include "loom/train/gcn_spec.hpp"
#include "loom/train/trainer.hpp"
#include "run_command.hpp"
#include "test_util.hpp"

namespace loom::train {
namespace {

namespace fs = std::filesystem;

constexpr int kSteps = 10;

TrainConfig oracle_config() {
  TrainConfig c;
  c.family = "gcn";
  c.data = "rmat:scale=6,edge_factor=4,features=12,classes=4,seed=5";
  c.split = "0:24,24:40,40:64";
  c.gcn.layers = 3;
  c.gcn.hidden = 16;
  c.gcn.dropout = 0.0;
  c.steps = kSteps;
  c.lr = 0.01;
  c.min_lr = 0.01;
  c.warmup_steps = 0;
  c.beta2 = 0.999;
  c.weight_decay = 5e-3;  // larger than the paper's, so the L2 term shows in the gradients
  c.grad_clip = 0.0;
  c.threads = 1;
  c.peak_gflops = 100;
  c.out_dir = "";
  return c;
}

void write_raw(const fs::path& path, const void* data, size_t bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
}

std::vector<float> read_raw(const fs::path& path, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * 4));
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  return v;
}

// max|got - want| <= rtol * max|want|, naming the tensor and the worst element otherwise.
::testing::AssertionResult close_to(const std::string& what, const float* got, const std::vector<float>& want,
                                    double rtol) {
  double err = 0.0, scale = 0.0;
  size_t worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(e <= err)) err = e, worst = i;
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  if (err <= rtol * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": max |loom - torch| " << err << " at " << worst << " (loom "
                                       << got[worst] << ", torch " << want[worst] << "), bound " << rtol << " * "
                                       << scale;
}

TEST(GcnOracle, LossGradientsAndTenAdamStepsMatchPyTorch) {
  const fs::path dir = testing::fresh_temp_dir("loom_gcn_oracle_" + std::to_string(::getpid()));
  Trainer trainer(oracle_config(), /*quiet=*/true);
  auto& spec = dynamic_cast<GcnSpec&>(trainer.spec());
  const kernels::CsrMatrix& A = spec.graph_operator().adjacency;
  const int64_t N = A.rows, F = spec.graph().num_features;
  nlohmann::json meta = {{"layers", 3}, {"lr", 0.01}, {"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8},
                         {"weight_decay", 5e-3}, {"steps", kSteps}};
  const std::vector<float> dense = kernels::csr_to_dense(A);
  write_raw(dir / "adjacency.f32", dense.data(), dense.size() * 4);
  meta["shapes"]["adjacency.f32"] = {N, N};
  const data::Batch batch = spec.train_batch(0, 0, 0);
  write_raw(dir / "features.f32", batch.inputs.f32(), static_cast<size_t>(batch.inputs.nbytes()));
  meta["shapes"]["features.f32"] = {N, F};
  write_raw(dir / "targets.i32", batch.targets.i32(), static_cast<size_t>(batch.targets.nbytes()));
  meta["shapes"]["targets.i32"] = {N};
  const std::map<std::string, Tensor> initial = trainer.state_dict();
  for (const auto& [key, t] : initial) {
    if (key.rfind("model.", 0) != 0) continue;
    const std::string name = key.substr(6);
    write_raw(dir / ("param." + name + ".f32"), t.f32(), static_cast<size_t>(t.nbytes()));
    meta["shapes"]["param." + name + ".f32"] = t.shape();
  }
  std::ofstream(dir / "meta.json") << meta.dump();

  const testing::CommandResult oracle =
      testing::run_command(std::string(LOOM_PYTHON) + " " LOOM_SOURCE_DIR "/tests/oracle/gcn_reference.py " + dir.string());
  ASSERT_EQ(oracle.exit_code, 0) << oracle.output;

  StepResult first = trainer.compute_gradients();
  EXPECT_TRUE(close_to("loss", &first.loss, read_raw(dir / "loss.f32", 1), 1e-5));
  const std::map<std::string, Tensor> grads = trainer.gradient_dict();
  ASSERT_EQ(grads.size(), 6u);
  for (const auto& [key, g] : grads)  // "grad.conv0.weight"
    EXPECT_TRUE(close_to(key, g.f32(), read_raw(dir / (key + ".f32"), g.numel()), 1e-5));
  trainer.apply_update(first);
  std::vector<float> losses = {first.loss};
  while (trainer.step() < kSteps) losses.push_back(trainer.train_step().loss);
  EXPECT_TRUE(close_to("Adam losses", losses.data(), read_raw(dir / "losses.f32", kSteps), 1e-5));
  int checked = 0;
  for (const auto& [key, t] : trainer.state_dict())
    if (key.rfind("model.", 0) == 0 && ++checked) {
      EXPECT_TRUE(close_to("final " + key.substr(6), t.f32(),
                           read_raw(dir / ("final." + key.substr(6) + ".f32"), t.numel()), 1e-4));
    }
  EXPECT_EQ(checked, 6);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace loom::train
