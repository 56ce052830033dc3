// The serial fallback of a 3D-parallel layer whose shapes do not divide the grid (AxoNN's
// auto_parallelize keeps such a layer a replicated nn.Linear): the whole weight on every rank,
// but the same input and output layout as the 3D layer it stands in for, so its neighbours
// do not change. gather_input: the input arrives split over `axis` and is gathered
// (backward: dx sliced back); slice_output: the output leaves split over `axis` (backward:
// dy gathered). Its gradients are the same on every rank of a depth slice; the recipe's
// replicated-gradient mean averages them over depth.
#pragma once

#include "loom/nn/linear.hpp"
#include "loom/parallel/tensor_parallel_3d/grid.hpp"

namespace loom::parallel::tp3d {

class SerialLinear3D : public nn::Linear {
 public:
  SerialLinear3D(int64_t in_features, int64_t out_features, int64_t blocks, const Grid3D& grid, Axis axis,
                 bool gather_input, bool slice_output);

 protected:
  Tensor forward_impl(const Tensor& x, nn::Context& ctx) override;
  Tensor backward_impl(const Tensor& dy, nn::Context& ctx) override;

 private:
  const Grid3D& grid_;
  Axis axis_;
  int64_t blocks_;
  bool gather_input_, slice_output_;
};

}  // namespace loom::parallel::tp3d
