// Optimizers against closed forms, the LR schedule's shape, and global-norm clipping.
#include <gtest/gtest.h>

#include <cmath>

#include "loom/optim/adamw.hpp"
#include "loom/optim/clip.hpp"
#include "loom/optim/lr_schedule.hpp"
#include "loom/optim/sgd.hpp"

namespace loom::optim {
namespace {

TEST(LrSchedule, WarmupThenCosineToTheFloor) {
  LrSchedule s{1.0f, 0.1f, 10, 110};
  EXPECT_FLOAT_EQ(s.at(0), 0.1f);
  EXPECT_FLOAT_EQ(s.at(9), 1.0f);
  EXPECT_FLOAT_EQ(s.at(10), 1.0f);
  EXPECT_NEAR(s.at(60), 0.55f, 1e-6);  // half-way down the cosine
  EXPECT_FLOAT_EQ(s.at(110), 0.1f);
  EXPECT_FLOAT_EQ(s.at(1000), 0.1f);
  for (int64_t t = 10; t < 110; ++t) EXPECT_GE(s.at(t), s.at(t + 1));
}

TEST(SGD, MomentumMatchesTheClosedForm) {
  nn::Parameter p("w", {2}, /*weight_decay=*/true);
  p.value().f32()[0] = 1.0f;
  p.value().f32()[1] = -2.0f;
  SGD opt({&p}, SGDConfig{0.5f, 0.1f});
  // Constant gradient g: buf1 = g + wd*w0, w1 = w0 - lr*buf1; buf2 = 0.5*buf1 + g + wd*w1; ...
  double w = 1.0, buf = 0.0;
  for (int step = 0; step < 3; ++step) {
    p.grad().f32()[0] = 0.25f;
    p.grad().f32()[1] = 0.25f;
    opt.step(0.1f);
    buf = 0.5 * buf + 0.25 + 0.1 * w;
    w -= 0.1 * buf;
  }
  EXPECT_NEAR(p.value().f32()[0], w, 1e-6);
  EXPECT_EQ(opt.steps_taken(), 3);
  EXPECT_EQ(opt.state().size(), 1u);
}

TEST(AdamW, FirstStepMovesByLrTimesSignAndDecaysOnlyFlaggedParameters) {
  nn::Parameter decayed("w", {1}, true), kept("b", {1}, false);
  decayed.value().f32()[0] = 2.0f;
  kept.value().f32()[0] = 2.0f;
  decayed.grad().f32()[0] = -3.0f;
  kept.grad().f32()[0] = -3.0f;
  AdamW opt({&decayed, &kept}, AdamWConfig{0.9f, 0.95f, 1e-8f, 0.5f});
  opt.step(0.1f);
  // Bias-corrected first step: update = lr * g / |g| (up to eps); decay: w *= 1 - lr * wd.
  EXPECT_NEAR(kept.value().f32()[0], 2.1f, 1e-6);
  EXPECT_NEAR(decayed.value().f32()[0], 2.0f * (1 - 0.05f) + 0.1f, 1e-6);
  EXPECT_EQ(opt.state().count("exp_avg_sq.w"), 1u);
}

TEST(Clip, ScalesToTheGlobalNormOnlyWhenAbove) {
  nn::Parameter a("a", {2}, true), b("b", {1}, true);
  a.grad().f32()[0] = 3.0f;
  a.grad().f32()[1] = 0.0f;
  b.grad().f32()[0] = 4.0f;
  std::vector<nn::Parameter*> params{&a, &b};
  const double norm = std::sqrt(grad_sum_squares(params));
  EXPECT_DOUBLE_EQ(norm, 5.0);
  EXPECT_FLOAT_EQ(clip_grads_to_norm(params, norm, 10.0f), 1.0f);
  EXPECT_FLOAT_EQ(a.grad().f32()[0], 3.0f);
  clip_grads_to_norm(params, norm, 1.0f);
  EXPECT_NEAR(std::sqrt(grad_sum_squares(params)), 1.0, 1e-6);
}

}  // namespace
}  // namespace loom::optim
