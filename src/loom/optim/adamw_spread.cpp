#include "loom/optim/adamw_spread.hpp"

#include <algorithm>
#include <cmath>

namespace loom::optim {

namespace {

// The update AdamW makes of grad from the moments m and v (copied: the caller's stay as
// they are), as the change of a parameter that starts at 0.
std::vector<float> update(const std::vector<float>& grad, const float* m, const float* v, const kernels::AdamWParams& p) {
  const int64_t n = static_cast<int64_t>(grad.size());
  std::vector<float> param(grad.size(), 0.0f), m_copy(m, m + n), v_copy(v, v + n);
  kernels::adamw_update(param.data(), grad.data(), m_copy.data(), v_copy.data(), n, p);
  return param;
}

}  // namespace

std::vector<float> adamw_update_spread(const float* grad, const float* m, const float* v, int64_t n, float delta,
                                       kernels::AdamWParams p) {
  p.weight_decay = 0.0f;
  const std::vector<float> g(grad, grad + n), at_g = update(g, m, v, p);
  std::vector<float> spread(static_cast<size_t>(n), 0.0f), moved(g);
  for (int k = -kSpreadSamples; k <= kSpreadSamples; ++k) {
    if (k == 0) continue;
    const float shift = delta * static_cast<float>(k) / kSpreadSamples;
    for (int64_t i = 0; i < n; ++i) moved[i] = g[i] + shift;
    const std::vector<float> at_moved = update(moved, m, v, p);
    for (int64_t i = 0; i < n; ++i) spread[i] = std::max(spread[i], std::fabs(at_moved[i] - at_g[i]));
  }
  return spread;
}

}  // namespace loom::optim
