// loom verify's parameter comparison and its AdamW bound (train/verify_compare.hpp,
// optim/adamw_spread.hpp): a parameter element whose gradient is within the gradient tolerance
// of zero is excused what its update can differ by; one whose gradient is of ordinary size
// is held to the parameter tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "loom/optim/adamw_spread.hpp"
#include "loom/train/trainer.hpp"
#include "loom/train/verify_compare.hpp"
#include "tiny_config.hpp"

namespace loom::train {
namespace {

Tensor tensor_of(const std::vector<float>& values) {
  Tensor t = Tensor::zeros({static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) t.f32()[i] = values[i];
  return t;
}

TrainConfig adamw_config() {
  TrainConfig c = testing::tiny_config();
  c.optimizer = "adamw";
  c.lr = 1e-3;
  c.eps = 1e-8;
  c.grad_clip = 0;
  return c;
}

TEST(AdamWSpread, MatchesTheFirstStepsSensitivityForASmallDelta) {
  // Step 1: update = lr * g / (|g| + eps), d(update)/dg = lr * eps / (|g| + eps)^2.
  const float lr = 1e-3f, eps = 1e-8f, delta = 1e-10f;
  const std::vector<float> g{1e-8f, -3e-8f, 0.5f}, zeros(3, 0.0f);
  const std::vector<float> spread =
      optim::adamw_update_spread(g.data(), zeros.data(), zeros.data(), 3, delta, kernels::AdamWParams{lr, 0.9f, 0.95f, eps, 0.1f, 1});
  for (size_t i = 0; i < 2; ++i) {
    const double slope = lr * eps / std::pow(std::fabs(g[i]) + eps, 2.0);
    EXPECT_NEAR(spread[i], slope * delta, 0.05 * slope * delta) << "element " << i;
  }
  EXPECT_LT(spread[2], 1e-12f);  // an ordinary gradient's update is lr * sign(g) whatever its rounding
}

TEST(VerifyBound, ExcusesATinyGradientElementAndNotAnOrdinaryOne) {
  const TrainConfig c = adamw_config();
  const float lr = static_cast<float>(c.lr);
  // A bias whose first gradient is a sum that nearly cancelled (1e-8, of eps's order), the
  // others of ordinary size; the moments before the first step are zero.
  const std::vector<float> g{1e-8f, 0.5f, -0.3f};
  const std::map<std::string, Tensor> grads{{"grad.b", tensor_of(g)}};
  const std::map<std::string, Tensor> state{{"optim.exp_avg.b", tensor_of({0, 0, 0})}, {"optim.exp_avg_sq.b", tensor_of({0, 0, 0})}};
  AdamWBound bound;
  bound.add_step(c, grads, state, lr, 0.58, 1, /*grad_rtol=*/1e-3);
  const std::vector<float>& allowed = bound.allowances().at("model.b");
  // Within 1e-3 * 0.5 of 1e-8 lies a gradient of the other sign: up to about 2 lr apart.
  EXPECT_GT(allowed[0], lr);
  EXPECT_LT(allowed[0], 2 * lr);
  EXPECT_LT(allowed[1], 1e-9f);
  EXPECT_LT(allowed[2], 1e-9f);

  // The serial first step from zero: -lr * g / (|g| + eps); the tensor's scale is lr.
  std::vector<float> serial(3);
  for (size_t i = 0; i < 3; ++i) serial[i] = -lr * g[i] / (std::fabs(g[i]) + 1e-8f);
  const std::map<std::string, Tensor> want{{"model.b", tensor_of(serial)}};
  const double param_rtol = 1e-3, off = 2.8e-3 * lr;  // the failure seen on a correct layout: rel 2.8e-3

  std::vector<float> tiny_off = serial;
  tiny_off[0] += static_cast<float>(off);
  const ParameterComparison excused =
      compare_parameters({{"model.b", tensor_of(tiny_off)}}, want, param_rtol, bound.allowances());
  EXPECT_LE(excused.worst.error, param_rtol);
  EXPECT_EQ(excused.excused.elements, 1);
  EXPECT_EQ(excused.excused.worst.name, "b");
  EXPECT_NEAR(excused.excused.worst.error, 2.8e-3, 1e-4);

  std::vector<float> ordinary_off = serial;
  ordinary_off[1] += static_cast<float>(off);
  const ParameterComparison failed =
      compare_parameters({{"model.b", tensor_of(ordinary_off)}}, want, param_rtol, bound.allowances());
  EXPECT_GT(failed.worst.error, param_rtol);
  EXPECT_NEAR(failed.worst.error, 2.8e-3, 1e-4);
  EXPECT_EQ(failed.worst.name, "b");
  EXPECT_EQ(failed.excused.elements, 0);

  // Without the bound (SGD, or no allowances) the tiny-gradient element fails as before.
  EXPECT_GT(compare_parameters({{"model.b", tensor_of(tiny_off)}}, want, param_rtol, {}).worst.error, param_rtol);
  TrainConfig sgd = c;
  sgd.optimizer = "sgd";
  AdamWBound none;
  none.add_step(sgd, grads, state, lr, 0.58, 1, 1e-3);
  EXPECT_TRUE(none.allowances().empty());
}

// On a real model's first steps: two identical serial runs compared as loom verify compares
// them; a parameter of the second run off by 3e-3 of its tensor, small next to a real bug's
// order-1 errors, on the element whose gradient is the tensor's largest, still fails.
TEST(VerifyBound, APerturbedParameterWithAnOrdinaryGradientFails) {
  TrainConfig c = adamw_config();
  c.batch_size = 2;
  c.steps = 2;
  c.warmup_steps = 1;
  c.threads = 1;
  Trainer serial(c, /*quiet=*/true), layout(c, true);
  AdamWBound bound;
  const double grad_rtol = 1e-3, param_rtol = 1e-3;
  std::map<std::string, Tensor> last_grads;
  for (int64_t step = 1; step <= c.steps; ++step) {
    StepResult want_step = serial.compute_gradients(), got_step = layout.compute_gradients();
    last_grads.clear();
    for (const auto& [key, g] : serial.gradient_dict()) last_grads[key] = g.clone();
    bound.add_step(c, last_grads, serial.state_dict(), want_step.lr, want_step.grad_norm, serial.step() + 1, grad_rtol);
    serial.apply_update(want_step);
    layout.apply_update(got_step);
  }
  const std::map<std::string, Tensor> want = serial.state_dict();
  std::map<std::string, Tensor> got;
  for (const auto& [key, t] : layout.state_dict()) got[key] = t.clone();
  const ParameterComparison same = compare_parameters(got, want, param_rtol, bound.allowances());
  EXPECT_EQ(same.worst.error, 0.0);
  EXPECT_EQ(same.excused.elements, 0);

  const std::string name = "blocks.0.mlp.fc.bias";
  const Tensor& g = last_grads.at("grad." + name);
  int64_t largest = 0;
  float scale = 0.0f;
  for (int64_t i = 0; i < g.numel(); ++i)
    if (std::fabs(g.f32()[i]) > std::fabs(g.f32()[largest])) largest = i;
  for (int64_t i = 0; i < g.numel(); ++i) scale = std::max(scale, std::fabs(want.at("model." + name).f32()[i]));
  got.at("model." + name).f32()[largest] += 3e-3f * scale;
  const ParameterComparison perturbed = compare_parameters(got, want, param_rtol, bound.allowances());
  EXPECT_EQ(perturbed.worst.name, name);
  EXPECT_GT(perturbed.worst.error, param_rtol);
  EXPECT_LE(perturbed.worst.error, 3e-3 * (1 + 1e-4));  // its allowance, if any, only lowers it
  EXPECT_EQ(perturbed.excused.elements, 0);
}

}  // namespace
}  // namespace loom::train
