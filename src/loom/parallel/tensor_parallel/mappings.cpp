#include "loom/parallel/tensor_parallel/mappings.hpp"

#include <cstring>

#include "loom/comm/activation_wire.hpp"
#include "loom/error.hpp"

namespace loom::parallel::tp {

// Every collective here moves activations or their gradients: in the group's activation
// dtype (comm/activation_wire.hpp), bf16 on the wire in a bf16 run.
namespace {
void sum_over(Tensor& t, comm::ProcessGroup& group) {
  if (group.size() > 1) comm::sum_activations(group, t);
}
}  // namespace

void f_backward(Tensor& dx, comm::ProcessGroup& group) { sum_over(dx, group); }

comm::Work start_f_backward(Tensor& dx, comm::ProcessGroup& group) {
  if (group.size() == 1) return comm::Work::completed();
  return comm::sum_activations_async(group, dx.f32(), dx.numel());
}

void g_forward(Tensor& y, comm::ProcessGroup& group) { sum_over(y, group); }

namespace {
// Activations are (B, T, C) with T outermost within a sequence, so a rank's chunk
// (rows [r T/t, (r+1) T/t) of every sequence) is B separate runs: the collectives work on
// rank-major blocks (t, B, T/t, C), and these move rows between the two layouts.
void copy_chunks(void* dst, const void* src, int64_t B, int64_t Tl, int64_t C, int t, bool to_blocks, DType dtype) {
  const int64_t value = static_cast<int64_t>(dtype_size(dtype));
  const size_t run = static_cast<size_t>(Tl * C * value);
  auto* to = static_cast<char*>(dst);
  const auto* from = static_cast<const char*>(src);
#pragma omp parallel for collapse(2) schedule(static)
  for (int r = 0; r < t; ++r)
    for (int64_t b = 0; b < B; ++b) {
      const int64_t block = (r * B + b) * Tl * C * value, seq = (b * t + r) * Tl * C * value;
      if (to_blocks)
        std::memcpy(to + block, from + seq, run);
      else
        std::memcpy(to + seq, from + block, run);
    }
}
}  // namespace

Tensor sequence_from_blocks(const Tensor& blocks, int64_t B, int64_t Tl, int64_t C, int t) {
  Tensor full = Tensor::empty({B, t * Tl, C}, blocks.dtype());
  copy_chunks(full.raw(), blocks.raw(), B, Tl, C, t, /*to_blocks=*/false, blocks.dtype());
  return full;
}

Tensor blocks_from_sequence(const Tensor& full, int t) {
  check(full.ndim() == 3 && full.size(1) % t == 0, "sequence parallelism: the sequence length (",
        full.ndim() == 3 ? full.size(1) : -1, ") must be divisible by tp (", t, ")");
  Tensor blocks = Tensor::empty({full.numel()}, full.dtype(), MemoryCategory::CommBuffers);
  copy_chunks(blocks.raw(), full.raw(), full.size(0), full.size(1) / t, full.size(2), t, /*to_blocks=*/true,
              full.dtype());
  return blocks;
}

SequenceGather::SequenceGather(const Tensor& local, comm::ProcessGroup& group) : local_(local), t_(group.size()) {
  if (t_ == 1) {
    blocks_ = local;
    work_ = comm::Work::completed();
    return;
  }
  check(local.ndim() == 3, "gather_sequence expects (B, T/t, C), got ", shape_str(local.shape()));
  blocks_ = Tensor::empty({t_ * local.numel()}, local.dtype(), MemoryCategory::CommBuffers);
  if (local.dtype() == DType::BF16) {  // a kept bf16 copy: gathered as it is
    work_ = comm::gather_activations_async(group, local.bf16(), blocks_.bf16(), local.numel());
    work_.then([local, blocks = blocks_] {});  // both live until the gather is waited for
  } else {
    work_ = comm::gather_activations_async(group, local.f32(), blocks_.f32(), local.numel());
  }
}

const Tensor& SequenceGather::blocks() const {
  work_.wait();
  return blocks_;
}

Tensor SequenceGather::whole() const {
  if (t_ == 1) return local_;
  return sequence_from_blocks(blocks(), local_.size(0), local_.size(1), local_.size(2), t_);
}

Tensor gather_sequence(const Tensor& local, comm::ProcessGroup& group) { return SequenceGather(local, group).whole(); }

comm::Work start_reduce_scatter_blocks(const Tensor& blocks, Tensor& out, comm::ProcessGroup& group) {
  check(blocks.numel() == out.numel() * group.size(), "reduce-scatter: ", blocks.numel(), " elements are not ",
        group.size(), " x ", out.numel());
  return comm::reduce_scatter_activations_async(group, blocks.f32(), out.f32(), out.numel());
}

SequenceReduceScatter::SequenceReduceScatter(const Tensor& full, comm::ProcessGroup& group) {
  const int t = group.size();
  if (t == 1) {
    local_ = full;
    work_ = comm::Work::completed();
    return;
  }
  blocks_ = blocks_from_sequence(full, t);
  local_ = Tensor::empty({full.size(0), full.size(1) / t, full.size(2)});
  work_ = start_reduce_scatter_blocks(blocks_, local_, group);
}

Tensor SequenceReduceScatter::result() const {
  work_.wait();
  return local_;
}

Tensor reduce_scatter_sequence(const Tensor& full, comm::ProcessGroup& group) {
  return SequenceReduceScatter(full, group).result();
}

namespace {
nn::ShardSpec feature_spec(const Tensor& t, int64_t blocks, const comm::ProcessGroup& group, int index) {
  return nn::ShardSpec{t.ndim() - 1, group.size(), index, blocks};
}
}  // namespace

Tensor features_from_gathered(const Tensor& all, const Tensor& local, int64_t blocks, const comm::ProcessGroup& group) {
  const int64_t n = local.numel();
  Tensor full = Tensor::empty(feature_spec(local, blocks, group, 0).full_shape(local.shape()));
  for (int r = 0; r < group.size(); ++r)
    nn::place_shard(all.narrow(r * n, n).view(local.shape()), full, feature_spec(local, blocks, group, r));
  return full;
}

Tensor gather_features(const Tensor& local, int64_t blocks, comm::ProcessGroup& group, bool in_fp32) {
  const int t = group.size();
  if (t == 1) return local;
  const int64_t n = local.numel();
  Tensor all = Tensor::empty({t * n}, DType::F32, MemoryCategory::CommBuffers);
  if (in_fp32)
    group.all_gather(local.view({n}), all);
  else
    comm::gather_activations(group, local.view({n}), all);
  return features_from_gathered(all, local, blocks, group);
}

Tensor slice_features(const Tensor& full, int64_t blocks, comm::ProcessGroup& group) {
  if (group.size() == 1) return full;
  Shape shape = full.shape();
  shape.back() /= group.size();
  Tensor local = Tensor::empty(shape);
  nn::copy_shard(full, local, feature_spec(local, blocks, group, group.rank()));
  return local;
}

}  // namespace loom::parallel::tp
