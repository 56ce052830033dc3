// The equivalence tests' parameter check (equivalence::parameters_match) holds a bf16 layout's
// parameters to what AdamW can move them by, `loom verify`'s bound (train::AdamWBound) of
// gradients within the gradient tolerance, recorded along the serial run; it used to pass any
// element within 2 x steps x lr, the most AdamW can move one by whatever its gradient. An
// element whose gradient is of ordinary size moved by more than its bound but less than that
// drift now fails; the serial run itself passes. Serial: no MPI.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "parallel/equivalence.hpp"

namespace loom::testing::equivalence {
namespace {

TEST(EquivalenceParameters, Bf16HeldToAdamWsBoundNotTwoLrAStep) {
  train::TrainConfig c = tiny(1, 2, 1);
  c.precision = "bf16";
  c.steps = 5;
  train::Trainer serial(c, /*quiet=*/true);
  const TrainingRun want = run(serial, kBf16Tolerances.grad);
  ASSERT_TRUE(want.adamw_bound.has_value());
  EXPECT_TRUE(parameters_match(want, want, c, kBf16Tolerances, "the serial run against itself"));

  // The element the old allowance hid most: the largest gap between the drift 2 x steps x lr and
  // what the check allows it now (the parameter tolerance of its tensor's scale plus its bound).
  const double drift = 2.0 * static_cast<double>(c.steps) * c.lr;
  size_t worst_i = 0, worst_k = 0;
  double worst_allowed = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < want.params.size(); ++i) {
    if (want.names[i].ends_with("attn.qkv.bias")) continue;  // its key third's scale is left out
    float scale = 0.0f;
    for (float x : want.params[i]) scale = std::max(scale, std::fabs(x));
    const std::vector<float>& bound = want.adamw_bound->at("model." + want.names[i]);
    for (size_t k = 0; k < bound.size(); ++k) {
      const double allowed = kBf16Tolerances.param * scale + bound[k];
      if (allowed < worst_allowed) worst_allowed = allowed, worst_i = i, worst_k = k;
    }
  }
  ASSERT_LT(worst_allowed, 0.5 * drift) << "no element the drift allowance was loose for";

  TrainingRun got = want;
  got.params[worst_i][worst_k] += static_cast<float>(0.5 * (worst_allowed + drift));
  const double moved = std::fabs(static_cast<double>(got.params[worst_i][worst_k]) - want.params[worst_i][worst_k]);
  EXPECT_GT(moved, worst_allowed);
  EXPECT_LT(moved, drift) << "the old check passed it: within 2 x steps x lr";
  const ::testing::AssertionResult held = parameters_match(got, want, c, kBf16Tolerances, "perturbed");
  EXPECT_FALSE(held) << want.names[worst_i] << "[" << worst_k << "] moved by " << moved << ", allowed " << worst_allowed;
  EXPECT_NE(std::string(held.message()).find(want.names[worst_i]), std::string::npos) << held.message();
}

}  // namespace
}  // namespace loom::testing::equivalence
