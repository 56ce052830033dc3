#include "loom/optim/clip.hpp"

#include "loom/kernels/residual.hpp"

namespace loom::optim {

double grad_sum_squares(const std::vector<nn::Parameter*>& params) {
  double sum = 0.0;
  for (const nn::Parameter* p : params) sum += kernels::sum_squares(p->grad().f32(), p->numel());
  return sum;
}

float clip_factor(double norm, float max_norm) {
  return max_norm <= 0.0f || norm <= max_norm ? 1.0f : static_cast<float>(max_norm / (norm + 1e-6));
}

float clip_grads_to_norm(const std::vector<nn::Parameter*>& params, double norm, float max_norm) {
  const float factor = clip_factor(norm, max_norm);
  if (factor == 1.0f) return factor;
  for (nn::Parameter* p : params) kernels::scale_inplace(p->grad().f32(), factor, p->numel());
  return factor;
}

}  // namespace loom::optim
