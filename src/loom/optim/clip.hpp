// Global-norm gradient clipping. The sum of squares is a separate step so a sharded run can
// all-reduce it before taking the root (each parameter counted once).
#pragma once

#include <vector>

#include "loom/nn/parameter.hpp"

namespace loom::optim {

double grad_sum_squares(const std::vector<nn::Parameter*>& params);
// The factor clipping scales gradients of global norm `norm` by: max_norm / norm when norm >
// max_norm (max_norm > 0), else 1.
float clip_factor(double norm, float max_norm);
// Scales every gradient by clip_factor(norm, max_norm); returns the factor applied.
float clip_grads_to_norm(const std::vector<nn::Parameter*>& params, double norm, float max_norm);

}  // namespace loom::optim
