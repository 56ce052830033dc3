#include "loom/parallel/tensor_parallel_3d/layers_3d.hpp"

#include "loom/nn/moe.hpp"

#include "loom/parallel/tensor_parallel_3d/linear_3d.hpp"
#include "loom/parallel/tensor_parallel_3d/serial_linear_3d.hpp"

namespace loom::parallel::tp3d {

namespace {
// A pair's first layer takes input over col and output over row; the second swaps them.
Roles roles_of(bool first) {
  return first ? Roles{Axis::Col, Axis::Row, /*slice_input=*/true, /*gather_output=*/false}
               : Roles{Axis::Row, Axis::Col, /*slice_input=*/false, /*gather_output=*/true};
}
}  // namespace

bool Layers3D::splits(int64_t in, int64_t out, int64_t blocks, bool first, const std::array<int64_t, 3>& sizes) {
  return Linear3D::misfit(in, out, blocks, sizes, roles_of(first)).empty();
}

Layers3D::Share Layers3D::share(int64_t in, int64_t out, int64_t blocks, bool first, const std::array<int64_t, 3>& sizes) {
  const Roles roles = roles_of(first);
  if (!splits(in, out, blocks, first, sizes)) return {in * out, out};
  auto size = [&](Axis a) { return sizes[static_cast<size_t>(a)]; };
  const int64_t pi = size(roles.in_axis), po = size(roles.out_axis), D = size(Axis::Depth);
  return {in / pi * (out / (po * D)), out / po};
}

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
  const Roles roles = roles_of(first);
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

int64_t Layers3D::expert_split(int64_t E, const std::array<int64_t, 3>& sizes) {
  const int64_t plane = sizes[0] * sizes[1];
  return E % plane == 0 ? plane : 1;
}

std::unique_ptr<nn::MoE> Layers3D::mixture_of_experts_over(int64_t C, const nn::MoeConfig& config,
                                                          const nn::SequenceParts& parts) const {
  const std::array<int64_t, 3> sizes{grid_.size(Axis::Row), grid_.size(Axis::Col), grid_.size(Axis::Depth)};
  if (plane_experts_ == nullptr || expert_split(config.experts, sizes) == 1) {
    auto moe = LayerBuilder::mixture_of_experts_over(C, config, parts);
    if (sizes[0] * sizes[1] > 1)
      fallbacks_.push_back({moe.get(), "its " + std::to_string(config.experts) + " experts do not divide over the plane's " +
                                           std::to_string(sizes[0] * sizes[1]) +
                                           " ranks (row x col): every plane rank runs every expert"});
    return moe;
  }
  auto moe = std::make_unique<nn::MoE>(C, config, *plane_experts_, parts);
  // Each plane rank's block of the experts is a piece of the tensor-parallel group's, held by
  // every depth rank (depth rank 0's counted and saved).
  for (nn::Parameter* p : moe->experts().parameters()) {
    nn::ShardSpec spec = p->shard_spec();
    spec.axis = nn::ShardSpec::kTensorAxis;
    spec.replica = grid_.rank(Axis::Depth);
    p->set_shard_spec(spec);
  }
  return moe;
}

}  // namespace loom::parallel::tp3d
