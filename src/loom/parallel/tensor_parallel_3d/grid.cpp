#include "loom/parallel/tensor_parallel_3d/grid.hpp"

#include <chrono>
#include <cstring>

#include "loom/comm/activation_wire.hpp"
#include "loom/error.hpp"
#include "loom/parallel/tensor_parallel/mappings.hpp"
#include "loom/trace/recorder.hpp"

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

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Tensor Grid3D::Pending::wait() {
  if (grid_ == nullptr) return Tensor();
  trace::Span span("wait", "tp_3d wait");
  const auto t0 = std::chrono::steady_clock::now();
  work_.wait();
  grid_->waited_s_ += work_.seconds_exposed_after(t0);  // to the collective's end, not this thread's next turn
  grid_ = nullptr;
  Tensor result = finish_();
  finish_ = nullptr;  // its buffers go now, not when the handle is next reused (a prefetch slot per layer)
  return result;
}

double Grid3D::take_waited_seconds() const {
  const double s = waited_s_;
  waited_s_ = 0.0;
  return s;
}

Grid3D::Pending Grid3D::start_all_reduce(Tensor& t, Axis a) const {
  Pending p;
  p.grid_ = this;
  p.work_ = size(a) > 1 ? group(a).all_reduce_async(t.f32(), t.numel(), comm::ReduceOp::Sum) : comm::Work::completed();
  p.finish_ = [t] { return t; };
  return p;
}

void Grid3D::all_reduce(Tensor& t, Axis a) const { start_all_reduce(t, a).wait(); }

Grid3D::Pending Grid3D::start_sum_activations(float* data, int64_t n, Axis a) const {
  Pending p;
  p.grid_ = this;
  p.work_ = size(a) > 1 ? comm::sum_activations_async(group(a), data, n) : comm::Work::completed();
  p.finish_ = [] { return Tensor(); };
  return p;
}

Grid3D::Pending Grid3D::start_sum_activations(Tensor& t, Axis a) const {
  Pending p = start_sum_activations(t.f32(), t.numel(), a);
  p.finish_ = [t] { return t; };
  return p;
}

void Grid3D::sum_activations(Tensor& t, Axis a) const { start_sum_activations(t, a).wait(); }

Tensor Grid3D::gather_features(const Tensor& local, Axis a, int64_t blocks) const {
  trace::Span span("wait", "tp_3d gather");
  const auto t0 = std::chrono::steady_clock::now();
  Tensor whole = tp::gather_features(local, blocks, group(a));
  if (size(a) > 1) waited_s_ += seconds_since(t0);
  return whole;
}

Grid3D::Pending Grid3D::start_gather_features_after(const Pending& before, const Tensor& local, Axis a,
                                                     int64_t blocks) const {
  comm::ProcessGroup& g = group(a);
  Pending p;
  p.grid_ = this;
  if (g.size() == 1) {
    p.work_ = before.work_;  // the whole is local itself, once before has written it
    p.finish_ = [local] { return local; };
    return p;
  }
  const int64_t n = local.numel();
  Tensor all = Tensor::empty({g.size() * n}, DType::F32, MemoryCategory::CommBuffers);
  p.work_ = comm::gather_activations_after(g, before.work_, local.f32(), all.f32(), n);
  p.finish_ = [all, local, blocks, &g] { return tp::features_from_gathered(all, local, blocks, g); };
  return p;
}

Tensor Grid3D::slice_features(const Tensor& full, Axis a, int64_t blocks) const {
  return tp::slice_features(full, blocks, group(a));
}

namespace {

// dst[j][i] = src[i][j] for src (a, b, inner): the depth shards' order (D, blocks, rows) <->
// the block's order (blocks, D, rows).
template <class T>
void swap_outer(const T* src, T* dst, int64_t a, int64_t b, int64_t inner) {
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j)
      std::memcpy(dst + (j * a + i) * inner, src + (i * b + j) * inner, sizeof(T) * static_cast<size_t>(inner));
}

}  // namespace

Grid3D::Pending Grid3D::start_all_gather_depth(const Tensor& shard, int64_t blocks) const {
  comm::ProcessGroup& depth = group(Axis::Depth);
  const int D = depth.size();
  Pending p;
  p.grid_ = this;
  if (D == 1) {
    p.work_ = comm::Work::completed();
    p.finish_ = [shard] { return shard; };
    return p;
  }
  check(shard.ndim() == 2 && shard.size(0) % blocks == 0, "all_gather_depth: shard ", shape_str(shard.shape()),
        " is not 2-D in ", blocks, " blocks");
  const int64_t n = shard.numel();
  // In the shard's dtype: a bf16 run passes its weight's bf16 copy (converted once a step), the
  // GEMMs' operand as it arrives, half the bytes.
  const DType wire = shard.dtype();
  Tensor gathered = Tensor::empty({D * n}, wire, MemoryCategory::CommBuffers);  // (D, blocks, rows/(blocks D), cols)
  if (wire == DType::BF16)
    p.work_ = depth.all_gather_bf16_async(shard.bf16(), gathered.bf16(), n);
  else
    p.work_ = depth.all_gather_async(shard.f32(), gathered.f32(), n);
  p.finish_ = [gathered, shard, blocks, D, n, wire] {
    if (blocks == 1) return gathered.view({D * shard.size(0), shard.size(1)});
    Tensor block = Tensor::empty({D * shard.size(0), shard.size(1)}, wire, MemoryCategory::CommBuffers);
    if (wire == DType::BF16)
      swap_outer(gathered.bf16(), block.bf16(), D, blocks, n / blocks);
    else
      swap_outer(gathered.f32(), block.f32(), D, blocks, n / blocks);
    return block;
  };
  return p;
}

Tensor Grid3D::all_gather_depth(const Tensor& shard, int64_t blocks) const {
  return start_all_gather_depth(shard, blocks).wait();
}

Grid3D::Pending Grid3D::start_reduce_scatter_depth(const Tensor& block, int64_t blocks) const {
  comm::ProcessGroup& depth = group(Axis::Depth);
  const int D = depth.size();
  Pending p;
  p.grid_ = this;
  if (D == 1) {
    p.work_ = comm::Work::completed();
    p.finish_ = [block] { return block; };
    return p;
  }
  check(block.ndim() == 2 && block.size(0) % (blocks * D) == 0, "reduce_scatter_depth: block ",
        shape_str(block.shape()), " does not split into ", blocks, " block(s) over depth ", D);
  const int64_t n = block.numel() / D;
  Tensor ordered = block;  // (D, blocks, rows, cols): the block itself when it is one block
  if (blocks > 1) {
    ordered = Tensor::empty({block.numel()}, DType::F32, MemoryCategory::CommBuffers);
    swap_outer(block.f32(), ordered.f32(), blocks, D, n / blocks);
  }
  Tensor shard = Tensor::empty({block.size(0) / D, block.size(1)}, DType::F32, MemoryCategory::CommBuffers);
  p.work_ = depth.reduce_scatter_async(ordered.f32(), shard.f32(), n, comm::ReduceOp::Avg);
  p.finish_ = [ordered, shard] { return shard; };
  return p;
}

Tensor Grid3D::reduce_scatter_depth(const Tensor& block, int64_t blocks) const {
  return start_reduce_scatter_depth(block, blocks).wait();
}

}  // namespace loom::parallel::tp3d
