// Linear3D: y = x W^T + b as AxoNN's 3D parallel matrix multiply. W (OC, C) is split by
// output features over `out_axis` and by input features over `in_axis` of the grid, and each
// rank's block again by rows over depth (FSDP); the batch is split over data x depth outside.
//   forward:  all-gather W over depth; y = x W^T on the local block; all-reduce y over in_axis
//             (row pieces of y, each summed as soon as it is computed)
//   backward: all-gather W again; dx = dy W, all-reduced over out_axis; dW = dy^T x,
//             reduce-scattered over depth (the mean of the depth ranks' batches).
// Consecutive layers swap the two axes, so the output of one (split over out_axis) is the
// input the next expects, with no redistribution in between. The bias is split like the
// output features and replicated over in_axis and depth (its gradient is averaged over depth
// by the recipe's replicated-gradient mean).
#pragma once

#include <array>

#include "loom/nn/linear.hpp"
#include "loom/parallel/tensor_parallel_3d/grid.hpp"
#include "loom/parallel/tensor_parallel_3d/overlap_3d.hpp"

namespace loom::parallel::tp3d {

struct Roles {
  Axis in_axis = Axis::Col;   // splits the input features (C)
  Axis out_axis = Axis::Row;  // splits the output features (OC)
  // The input arrives whole (B, T, C): take this rank's in_axis slice (backward: gather dx).
  bool slice_input = false;
  // Return the whole output (all-gathered over out_axis; backward: this rank's slice of dy).
  bool gather_output = false;
};

class Linear3D : public nn::Linear {
 public:
  // blocks > 1: the output features are that many equal blocks, each split separately (a
  // fused QKV projection: every rank gets q, k and v of its heads).
  // overlap: the collectives started ahead and completed late (overlap_3d.hpp); nullptr: blocking.
  Linear3D(int64_t in_features, int64_t out_features, int64_t blocks, const Grid3D& grid, Roles roles,
           bool bias = true, Overlap3D* overlap = nullptr);

  // Why (in, out, blocks) cannot be split on this grid with these roles, or "" when it can.
  static std::string misfit(int64_t in_features, int64_t out_features, int64_t blocks, const Grid3D& grid, Roles roles);
  // The same on a grid of these axis sizes (row, col, depth), before any grid exists.
  static std::string misfit(int64_t in_features, int64_t out_features, int64_t blocks, const std::array<int64_t, 3>& sizes,
                            Roles roles);

 protected:
  Tensor forward_impl(const Tensor& x, nn::Context& ctx) override;  // (N, C/in) or (N, C) -> (N, OC/out) or (N, OC)
  Tensor backward_impl(const Tensor& dy, nn::Context& ctx) override;

 private:
  const Grid3D& grid_;
  Roles roles_;
  int64_t blocks_;
  int64_t in_local_, out_local_;  // this rank's block: (out_local_, in_local_)
  Overlap3D* overlap_;
  int index_ = -1;  // in overlap_'s forward order
  // Forward's output rows are computed and summed over in_axis in this many pieces (fewer
  // when there are fewer rows): with overlap, a piece's sum runs under the next one's GEMM.
  static constexpr int64_t kOutputPieces = 4;
};

}  // namespace loom::parallel::tp3d
