// How far AdamW's update of each element can move when its gradient moves within +-delta:
// the tolerance `loom verify` gives a parameter on top of its own, so that gradients it
// accepts as equal are never failed as parameters.
//
// The step-1 update is lr * g / (|g| + eps) (m = g, sqrt(v) = |g| after bias correction), so
// its sensitivity d(update)/dg = lr * eps / (|g| + eps)^2: next to nothing where |g| >> eps,
// up to lr / (4 eps) where |g| is of eps's order. A bias gradient that is a sum nearly
// cancelling to 1e-8 turns a rounding difference of the sum's order into a parameter
// difference of a good share of lr, while a gradient of ordinary size takes none.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/kernels/adamw.hpp"

namespace loom::optim {

// For each of n elements: the largest |update(g') - update(g)| over g' in [g - delta, g + delta]
// (sampled at 2 * kSamples + 1 evenly spaced points, the ends included: the step-1 update is
// monotone in g, so its ends bound it; later steps' moments can bend it, which the inner points
// follow), with m and v the moments before the step and p's lr, betas, eps and step. The
// update is AdamW's kernel itself; weight decay, which does not depend on g, is left out.
inline constexpr int kSpreadSamples = 4;
std::vector<float> adamw_update_spread(const float* grad, const float* m, const float* v, int64_t n, float delta,
                                       kernels::AdamWParams p);

}  // namespace loom::optim
