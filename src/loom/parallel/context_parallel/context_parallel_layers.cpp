#include "loom/parallel/context_parallel/context_parallel_layers.hpp"

#include "loom/error.hpp"
#include "loom/kernels/embedding.hpp"

namespace loom::parallel::cp {

ContextParallelEmbedding::ContextParallelEmbedding(int64_t V, int64_t Vp, int64_t block_size, int64_t C, int rank,
                                                   int cp, Split split)
    : nn::Embedding(V, Vp, block_size, C), rank_(rank), cp_(cp), split_(split) {}

std::array<int64_t, 2> ContextParallelEmbedding::first_positions(int64_t local_T) const {
  // local_T = T / cp rows: two chunks of local_T / 2 rows of a sequence of T = local_T * cp.
  const std::vector<int64_t> positions = positions_of(local_T * cp_, rank_, cp_, split_);
  return {positions.front(), positions[static_cast<size_t>(local_T / 2)]};
}

Tensor ContextParallelEmbedding::forward_impl(const Tensor& idx, nn::Context& ctx) {
  check(idx.ndim() == 2 && idx.dtype() == DType::I32, "embedding expects (B, T/cp) token ids, got ",
        shape_str(idx.shape()), " ", dtype_name(idx.dtype()));
  const int64_t B = idx.size(0), Tl = idx.size(1), Tc = Tl / 2;
  check(Tl * cp_ <= block_size_, "sequence length ", Tl * cp_, " exceeds block_size ", block_size_);
  const std::array<int64_t, 2> first = first_positions(Tl);
  Tensor out = Tensor::empty({B, Tl, C_});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t a = 0; a < 2; ++a)
      kernels::embedding_forward(out.f32() + (b * Tl + a * Tc) * C_, idx.i32() + b * Tl + a * Tc, wte_->value().f32(),
                                 wpe_->value().f32() + first[a] * C_, 1, Tc, C_, V_);
  ctx.save(this, {idx});
  return out;
}

Tensor ContextParallelEmbedding::backward_impl(const Tensor& dy, nn::Context& ctx) {
  const Tensor& idx = ctx.saved(this, 0);
  const int64_t B = idx.size(0), Tl = idx.size(1), Tc = Tl / 2;
  const std::array<int64_t, 2> first = first_positions(Tl);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t a = 0; a < 2; ++a)
      kernels::embedding_backward(wte_->grad().f32(), wpe_->grad().f32() + first[a] * C_,
                                  dy.f32() + (b * Tl + a * Tc) * C_, idx.i32() + b * Tl + a * Tc, 1, Tc, C_);
  wte_->grad_contributed();
  wpe_->grad_contributed();
  ctx.release(this);
  return Tensor();
}

std::unique_ptr<nn::Module> ContextParallelLayers::attention(int64_t C, int64_t NH) const {
  return std::make_unique<RingAttention>(C, NH, group_, split_, stats_);
}

std::unique_ptr<nn::Embedding> ContextParallelLayers::embedding(int64_t V, int64_t Vp, int64_t block_size,
                                                                int64_t C) const {
  return std::make_unique<ContextParallelEmbedding>(V, Vp, block_size, C, group_.rank(), group_.size(), split_);
}

}  // namespace loom::parallel::cp
