// Numerical faults under tensor and pipeline parallelism: a NaN in one rank's *gradient*
// (the loss stays finite) reaches every rank through the global gradient norm, so every
// rank stops with the same error (on_nan = "stop") or skips the same step ("skip") and the
// replicas never diverge. (A NaN loss under data parallelism: test_ddp.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "comm/mpi_test_env.hpp"
#include "loom/error.hpp"
#include "parallel/equivalence.hpp"

namespace loom {
namespace {

using loom::testing::world;
using loom::testing::equivalence::tiny;

struct Layout {
  int64_t pp, tp;
};

// Layouts without data parallelism, so no gradient reduction races with the poisoning hook.
std::vector<Layout> layouts_for(int ranks) {
  if (ranks == 2) return {{1, 2}, {2, 1}};
  if (ranks == 4) return {{2, 2}};
  return {};
}

train::TrainConfig config_for(const Layout& l, const std::string& on_nan) {
  train::TrainConfig c = tiny(1, 2, l.pp > 1 ? 2 : 1);
  c.pp = l.pp;
  c.tp = l.tp;
  c.on_nan = on_nan;
  return c;
}

// The last rank's first MLP weight gets a NaN gradient while `armed` (a grad-ready hook runs
// after backward has written the gradient, before the step reduces the norm).
void poison_last_rank(train::Trainer& t, const bool& armed) {
  if (world().rank() != world().size() - 1) return;
  t.model().blocks()[0]->mlp().fc().weight().add_grad_ready_hook([&armed](nn::Parameter& p) {
    if (armed) p.grad().f32()[0] = NAN;
  });
}

TEST(NonFinite, AGradientNaNOnOneRankStopsEveryRankUnderTpAndPp) {
  for (const Layout& l : layouts_for(world().size())) {
    SCOPED_TRACE("pp " + std::to_string(l.pp) + " x tp " + std::to_string(l.tp));
    train::Trainer t(config_for(l, "stop"), true, &world());
    bool armed = true;
    poison_last_rank(t, armed);
    try {
      t.train_step();
      ADD_FAILURE() << "expected every rank to stop";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("non-finite gradient norm at step 1"), std::string::npos) << e.what();
    }
  }
}

TEST(NonFinite, AGradientNaNOnOneRankSkipsTheStepOnEveryRankUnderTpAndPp) {
  for (const Layout& l : layouts_for(world().size())) {
    SCOPED_TRACE("pp " + std::to_string(l.pp) + " x tp " + std::to_string(l.tp));
    train::Trainer t(config_for(l, "skip"), true, &world());
    bool armed = true;
    poison_last_rank(t, armed);
    const Tensor& w = t.model().blocks()[0]->mlp().fc().weight().value();
    const std::vector<float> before(w.f32(), w.f32() + w.numel());
    const train::StepResult r = t.train_step();
    EXPECT_TRUE(r.skipped);
    EXPECT_TRUE(std::isfinite(r.loss)) << "the loss was healthy: the gradient alone must be caught";
    EXPECT_TRUE(loom::testing::all_close(w.f32(), before.data(), w.numel(), 0, 0, "weights after a skipped step"));
    armed = false;
    const train::StepResult next = t.train_step();
    EXPECT_FALSE(next.skipped);
    EXPECT_TRUE(std::isfinite(next.grad_norm));
    EXPECT_FALSE(loom::testing::all_close(w.f32(), before.data(), w.numel(), 0, 0, "weights after a healthy step"));
  }
}

}  // namespace
}  // namespace loom
