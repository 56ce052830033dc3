#include "loom/parallel/tensor_parallel_3d/layers_3d.hpp"

#include "loom/parallel/tensor_parallel_3d/linear_3d.hpp"
#include "loom/parallel/tensor_parallel_3d/serial_linear_3d.hpp"

namespace loom::parallel::tp3d {

std::unique_ptr<nn::Linear> Layers3D::column_parallel_linear(int64_t in, int64_t out, int64_t blocks) const {
  return make(in, out, blocks, /*first=*/true);
}

std::unique_ptr<nn::Linear> Layers3D::row_parallel_linear(int64_t in, int64_t out) const {
  return make(in, out, 1, /*first=*/false);
}

std::unique_ptr<nn::Linear> Layers3D::make(int64_t in, int64_t out, int64_t blocks, bool first) const {
  // The features between the two layers of a pair (QKV -> proj, fc -> proj) are split over
  // row whenever row divides them; both layers of the pair see the same count, so they agree.
  const int64_t between = first ? out : in;
  const bool split_between = between % (blocks * grid_.size(Axis::Row)) == 0;
  const Roles roles = first ? Roles{Axis::Col, Axis::Row, /*slice_input=*/true, /*gather_output=*/false}
                            : Roles{Axis::Row, Axis::Col, /*slice_input=*/false, /*gather_output=*/true};
  const std::string why = Linear3D::misfit(in, out, blocks, grid_, roles);
  if (why.empty()) {
    auto layer = std::make_unique<Linear3D>(in, out, blocks, grid_, roles, /*bias=*/true, overlap_.get());
    depth_sharded_.insert(&layer->weight());
    return layer;
  }
  std::unique_ptr<nn::Linear> layer = std::make_unique<SerialLinear3D>(
      in, out, blocks, grid_, Axis::Row, /*gather_input=*/!first && split_between, /*slice_output=*/first && split_between);
  fallbacks_.push_back({layer.get(), why});
  return layer;
}

}  // namespace loom::parallel::tp3d
