// Loom's mixture-of-experts layer against a reference MoE written in PyTorch
// (tests/oracle/moe_reference.py, float64): the layer's output, the load-balancing loss,
// the loss sum(y * dy) + coef * aux and the gradients of the input, the router and every
// expert weight. Dropless, with capacity dropping, and top-1. Tolerance: max|loom - torch|
// <= 1e-5 * max|torch| per tensor (fp32 against float64; measured ~1e-7).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "loom/nn/moe.hpp"
#include "oracle/oracle_util.hpp"
#include "test_util.hpp"

namespace loom::moe_oracle_test {
namespace {

using loom::testing::oracle::run_pytorch;
using loom::testing::oracle::tensor_close;

constexpr double kRelTol = 1e-5;

struct MoeCase {
  int64_t E = 4, K = 2;
  double capacity_factor = 0.0;
  int64_t B = 3, T = 8, C = 8;
};

Tensor random_tensor(const Shape& shape, uint64_t seed, float bound) {
  Tensor t = Tensor::empty(shape);
  const auto r = loom::testing::random_vector(t.numel(), seed, -bound, bound);
  std::copy(r.begin(), r.end(), t.f32());
  return t;
}

// Returns how many assignments Loom dropped, so a capacity case can show it dropped some.
int64_t check_against_pytorch(const MoeCase& c) {
  nn::MoeConfig config;
  config.experts = c.E;
  config.top_k = c.K;
  config.capacity_factor = c.capacity_factor;
  config.aux_loss_coef = 0.5;  // large, so a wrong aux gradient shows in the router's
  nn::MoE moe(c.C, config);
  // O(1) activations: weights uniform with std 1/sqrt(fan_in), biases in [-0.3, 0.3].
  uint64_t seed = 7;
  for (nn::Parameter* p : moe.parameters()) {
    const float bound = p->value().ndim() >= 2 ? std::sqrt(3.0f / static_cast<float>(p->shape().back())) : 0.3f;
    p->value().copy_from(random_tensor(p->shape(), ++seed, p->name() == "router.weight" ? 1.5f : bound));
  }
  const Tensor x = random_tensor({c.B, c.T, c.C}, 101, 1.0f), dy = random_tensor({c.B, c.T, c.C}, 102, 1.0f);

  // One directory per test: CTest runs the cases of this file in parallel.
  const std::filesystem::path dir = loom::testing::fresh_temp_dir(
      std::string("moe_oracle_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
  train::TensorFile in;
  in.tensors["x"] = x;
  in.tensors["dy"] = dy;
  for (nn::Parameter* p : moe.parameters()) in.tensors["param." + p->name()] = p->value().clone();
  in.metadata = {{"top_k", std::to_string(c.K)},
                 {"capacity_factor", std::to_string(c.capacity_factor)},
                 {"aux_loss_coef", std::to_string(config.aux_loss_coef)}};
  train::save_tensor_file((dir / "in.safetensors").string(), in);

  nn::Context ctx;
  const Tensor y = moe.forward(x, ctx);
  Tensor dx = moe.backward(dy, ctx);
  const nn::MoeStats stats = moe.take_stats();
  double loss = config.aux_loss_coef * stats.aux_loss_sum;
  for (int64_t i = 0; i < y.numel(); ++i) loss += static_cast<double>(y.f32()[i]) * dy.f32()[i];

  const train::TensorFile torch = run_pytorch(LOOM_SOURCE_DIR "/tests/oracle/moe_reference.py", dir / "in.safetensors",
                                              dir / "out.safetensors");
  std::filesystem::remove_all(dir);
  if (torch.tensors.empty()) return stats.dropped;
  EXPECT_TRUE(tensor_close("y", y, torch.tensors.at("y"), kRelTol, 0));
  const double want_aux = torch.tensors.at("aux").f32()[0], want_loss = torch.tensors.at("loss").f32()[0];
  EXPECT_NEAR(stats.aux_loss_sum, want_aux, kRelTol * std::fabs(want_aux)) << "load-balancing loss";
  EXPECT_NEAR(loss, want_loss, kRelTol * std::fabs(want_loss)) << "loss";
  EXPECT_TRUE(tensor_close("grad x", dx, torch.tensors.at("grad.x"), kRelTol, 0));
  for (nn::Parameter* p : moe.parameters())
    EXPECT_TRUE(tensor_close("grad " + p->name(), p->grad(), torch.tensors.at("grad." + p->name()), kRelTol, 0));
  return stats.dropped;
}

TEST(MoeOracle, DroplessTopTwoMatchesPyTorch) { EXPECT_EQ(check_against_pytorch({}), 0); }

TEST(MoeOracle, CapacityDroppingMatchesPyTorch) {
  MoeCase c;
  c.capacity_factor = 0.75;  // ceil(0.75 * 2 * 8 / 4) = 3 of a sequence's 16 choices per expert
  EXPECT_GT(check_against_pytorch(c), 0) << "the case must drop tokens to test dropping";
}

TEST(MoeOracle, TopOneOfFiveExpertsWithCapacityMatchesPyTorch) {
  MoeCase c;
  c.E = 5;
  c.K = 1;
  c.capacity_factor = 1.0;
  c.T = 7;
  check_against_pytorch(c);
}

}  // namespace
}  // namespace loom::moe_oracle_test
