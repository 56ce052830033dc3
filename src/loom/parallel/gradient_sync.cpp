#include "loom/parallel/gradient_sync.hpp"

#include "loom/kernels/residual.hpp"

namespace loom::parallel {

double sum_squares_of(const std::vector<nn::Parameter*>& params, const ParameterFilter& counted) {
  double sum = 0.0;
  for (const nn::Parameter* p : params)
    if (!counted || counted(*p)) sum += kernels::sum_squares(p->grad().f32(), p->numel());
  return sum;
}

double LocalGradients::grad_sum_squares(const ParameterFilter& counted) { return sum_squares_of(params_, counted); }

}  // namespace loom::parallel
