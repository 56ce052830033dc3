// loom verify's parameter comparison and its AdamW bound (train/verify_compare.hpp,
// optim/adamw_spread.hpp): a parameter element whose gradient is within the gradient tolerance
// of zero is excused what its update can differ by; one whose gradient is of ordinary size
// is held to the parameter tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
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

// A NaN in the layout's gradients, parameters or moments is the worst difference (infinite),
// never none: compared as a number it is past no tolerance, and a layout whose update made a
// NaN parameter passed (`verify --inject-gradient-error nan`, before that was refused).
TEST(VerifyCompare, ANanIsTheWorstDifferenceNotNone) {
  const TrainConfig c = adamw_config();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::map<std::string, Tensor> grads{{"grad.b", tensor_of({0.5f, -0.3f})}};
  const Worst grad = worst_gradient_difference({{"grad.b", tensor_of({0.5f, nan})}}, grads);
  EXPECT_EQ(grad.name, "b");
  EXPECT_TRUE(std::isinf(grad.error)) << grad.error;

  const std::map<std::string, Tensor> params{{"model.b", tensor_of({0.1f, 0.2f})}};
  const ParameterComparison with_nan = compare_parameters({{"model.b", tensor_of({nan, 0.2f})}}, params, 1e-3, {});
  EXPECT_EQ(with_nan.worst.name, "b");
  EXPECT_TRUE(std::isinf(with_nan.worst.error)) << with_nan.worst.error;
  // A NaN allowance (the serial run's gradient NaN) excuses nothing.
  const Allowances nan_bound{{"model.b", {nan, nan}}};
  EXPECT_TRUE(std::isinf(compare_parameters({{"model.b", tensor_of({0.5f, 0.2f})}}, params, 1e-3, nan_bound).worst.error));

  const std::map<std::string, Tensor> moments{{"optim.exp_avg.b", tensor_of({0.05f, -0.03f})}};
  const Worst moment = worst_moment_difference(c, {{"optim.exp_avg.b", tensor_of({nan, -0.03f})}}, moments, grads, 0.58, 1e-3, 0.0);
  EXPECT_EQ(moment.name, "exp_avg.b");
  EXPECT_TRUE(std::isinf(moment.error)) << moment.error;
}

// `loom verify --reanchor`: the moments after a step from the same state are allowed what a
// gradient within the tolerance moves them by, and no more (a layout corrupting its moments).
TEST(VerifyMoments, AllowWhatTheGradientToleranceMovesThemByAndNoMore) {
  const TrainConfig c = adamw_config();  // no clipping
  const double grad_rtol = 1e-3, norm_rtol = 0.0, delta = grad_rtol * 0.5;
  const std::vector<float> g{0.5f, -0.3f, 0.0f};
  const std::map<std::string, Tensor> grads{{"grad.b", tensor_of(g)}};
  // The first step from zero moments: m = (1 - beta1) g, v = (1 - beta2) g^2.
  std::vector<float> m(3), v(3);
  for (size_t i = 0; i < 3; ++i) {
    m[i] = static_cast<float>((1 - c.beta1) * g[i]);
    v[i] = static_cast<float>((1 - c.beta2) * g[i] * g[i]);
  }
  const std::map<std::string, Tensor> want{{"optim.exp_avg.b", tensor_of(m)}, {"optim.exp_avg_sq.b", tensor_of(v)}};
  auto with = [&](double g2_shift) {  // the moments of the gradient with its element 2 moved by g2_shift
    std::vector<float> m2 = m, v2 = v;
    const double g2 = g[2] + g2_shift;
    m2[2] = static_cast<float>((1 - c.beta1) * g2);
    v2[2] = static_cast<float>((1 - c.beta2) * g2 * g2);
    return std::map<std::string, Tensor>{{"optim.exp_avg.b", tensor_of(m2)}, {"optim.exp_avg_sq.b", tensor_of(v2)}};
  };
  EXPECT_EQ(worst_moment_difference(c, want, want, grads, 0.58, grad_rtol, norm_rtol).error, 0.0);
  EXPECT_EQ(worst_moment_difference(c, with(0.9 * delta), want, grads, 0.58, grad_rtol, norm_rtol).error, 0.0);
  const Worst past = worst_moment_difference(c, with(3 * delta), want, grads, 0.58, grad_rtol, norm_rtol);
  EXPECT_EQ(past.name, "exp_avg.b");  // 2 delta past, relative to m's scale 0.05: 2e-3
  EXPECT_NEAR(past.error, (1 - c.beta1) * 2 * delta / ((1 - c.beta1) * 0.5), 1e-5);
}

// load_state_dict sets what state_dict gathers: a run set to another's state continues as it.
TEST(VerifyMoments, LoadStateDictTakesTheOtherRunsState) {
  TrainConfig c = adamw_config();
  c.batch_size = 2;
  c.steps = 3;
  c.threads = 1;
  Trainer ahead(c, /*quiet=*/true), behind(c, true);
  ahead.train_step();
  behind.train_step();
  std::map<std::string, Tensor> off;  // every parameter and moment 1% off
  for (const auto& [key, t] : ahead.state_dict()) {
    off[key] = t.clone();
    for (int64_t i = 0; i < t.numel(); ++i) off[key].f32()[i] *= 1.01f;
  }
  behind.load_state_dict(off);
  EXPECT_NEAR(compare_parameters(behind.state_dict(), ahead.state_dict(), 1e-6, {}).worst.error, 1e-2, 1e-4);
  behind.load_state_dict(ahead.state_dict());
  ahead.train_step();
  behind.train_step();
  const std::map<std::string, Tensor> want = ahead.state_dict(), got = behind.state_dict();
  EXPECT_EQ(compare_parameters(got, want, 0.0, {}).worst.error, 0.0);
  for (const auto& [key, t] : want)
    for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(got.at(key).f32()[i], t.f32()[i]) << key;
}

}  // namespace
}  // namespace loom::train
