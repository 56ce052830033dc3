// Parameter initialisation from a seeded generator (GPT-2 style: normal(0, 0.02) for
// matrices, zero biases, unit LayerNorm gains). Same seed, same weights, on every rank.
#pragma once

#include <cstdint>
#include <random>

#include "loom/nn/parameter.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom::nn {

using Rng = std::mt19937_64;

void init_normal(Tensor& t, float stddev, Rng& rng);
// A tensor-parallel piece gets its slice of the full tensor drawn in the serial order, so
// every layout starts from the serial run's weights.
void init_normal(Parameter& p, float stddev, Rng& rng);

}  // namespace loom::nn
