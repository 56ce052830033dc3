#include "loom/parallel/tensor_parallel_3d/grid.hpp"

#include <cstring>

#include "loom/error.hpp"
#include "loom/parallel/tensor_parallel/mappings.hpp"

namespace loom::parallel::tp3d {

std::string axis_name(Axis a) {
  switch (a) {
    case Axis::Row: return "row";
    case Axis::Col: return "col";
    case Axis::Depth: return "depth";
  }
  return "?";
}

comm::ProcessGroup& Grid3D::group(Axis a) const {
  switch (a) {
    case Axis::Row: return row_;
    case Axis::Col: return col_;
    case Axis::Depth: return depth_;
  }
  throw Error("unknown grid axis");
}

int Grid3D::grid_rank() const {
  return (rank(Axis::Depth) * size(Axis::Row) + rank(Axis::Row)) * size(Axis::Col) + rank(Axis::Col);
}

std::string Grid3D::describe() const {
  return "row " + std::to_string(size(Axis::Row)) + " x col " + std::to_string(size(Axis::Col)) + " x depth " +
         std::to_string(size(Axis::Depth));
}

void Grid3D::all_reduce(Tensor& t, Axis a) const {
  if (size(a) > 1) group(a).all_reduce(t, comm::ReduceOp::Sum);
}

Tensor Grid3D::gather_features(const Tensor& local, Axis a, int64_t blocks) const {
  return tp::gather_features(local, blocks, group(a));
}

Tensor Grid3D::slice_features(const Tensor& full, Axis a, int64_t blocks) const {
  return tp::slice_features(full, blocks, group(a));
}

namespace {

// dst[j][i] = src[i][j] for src (a, b, inner): the depth shards' order (D, blocks, rows) <->
// the block's order (blocks, D, rows).
void swap_outer(const float* src, float* dst, int64_t a, int64_t b, int64_t inner) {
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j)
      std::memcpy(dst + (j * a + i) * inner, src + (i * b + j) * inner, sizeof(float) * static_cast<size_t>(inner));
}

}  // namespace

Tensor Grid3D::all_gather_depth(const Tensor& shard, int64_t blocks) const {
  comm::ProcessGroup& depth = group(Axis::Depth);
  const int D = depth.size();
  if (D == 1) return shard;
  check(shard.ndim() == 2 && shard.size(0) % blocks == 0, "all_gather_depth: shard ", shape_str(shard.shape()),
        " is not 2-D in ", blocks, " blocks");
  const int64_t n = shard.numel();
  Tensor gathered = Tensor::empty({D * n}, DType::F32, MemoryCategory::CommBuffers);  // (D, blocks, rows/(blocks D), cols)
  depth.all_gather(shard.view({n}), gathered);
  Tensor block = Tensor::empty({D * shard.size(0), shard.size(1)}, DType::F32, MemoryCategory::CommBuffers);
  if (blocks == 1) {
    std::memcpy(block.f32(), gathered.f32(), sizeof(float) * static_cast<size_t>(D * n));
  } else {
    swap_outer(gathered.f32(), block.f32(), D, blocks, n / blocks);
  }
  return block;
}

Tensor Grid3D::reduce_scatter_depth(const Tensor& block, int64_t blocks) const {
  comm::ProcessGroup& depth = group(Axis::Depth);
  const int D = depth.size();
  if (D == 1) return block;
  check(block.ndim() == 2 && block.size(0) % (blocks * D) == 0, "reduce_scatter_depth: block ",
        shape_str(block.shape()), " does not split into ", blocks, " block(s) over depth ", D);
  const int64_t n = block.numel() / D;
  Tensor ordered = Tensor::empty({block.numel()}, DType::F32, MemoryCategory::CommBuffers);  // (D, blocks, rows, cols)
  if (blocks == 1) {
    std::memcpy(ordered.f32(), block.f32(), sizeof(float) * static_cast<size_t>(block.numel()));
  } else {
    swap_outer(block.f32(), ordered.f32(), blocks, D, n / blocks);
  }
  Tensor shard = Tensor::empty({block.size(0) / D, block.size(1)}, DType::F32, MemoryCategory::CommBuffers);
  depth.reduce_scatter(ordered, shard, comm::ReduceOp::Avg);
  return shard;
}

}  // namespace loom::parallel::tp3d
