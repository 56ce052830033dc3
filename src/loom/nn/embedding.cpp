#include "loom/nn/embedding.hpp"

#include "loom/error.hpp"
#include "loom/kernels/embedding.hpp"

namespace loom::nn {

Embedding::Embedding(int64_t vocab_size, int64_t padded_vocab_size, int64_t block_size, int64_t C)
    : V_(vocab_size), block_size_(block_size), C_(C) {
  wte_ = &register_parameter("wte", {padded_vocab_size, C}, /*weight_decay=*/true);
  wpe_ = &register_parameter("wpe", {block_size, C}, /*weight_decay=*/true);
}

Tensor Embedding::forward_impl(const Tensor& idx, Context& ctx) {
  check(idx.ndim() == 2 && idx.dtype() == DType::I32, "embedding expects (B, T) token ids, got ",
        shape_str(idx.shape()), " ", dtype_name(idx.dtype()));
  const int64_t B = idx.size(0), T = idx.size(1);
  check(T <= block_size_, "sequence length ", T, " exceeds block_size ", block_size_);
  Tensor out = Tensor::empty({B, T, C_});  // (B, T, C)
  kernels::embedding_forward(out.f32(), idx.i32(), wte_->value().f32(), wpe_->value().f32(), B, T, C_, V_);
  ctx.save(this, {idx});
  return out;
}

Tensor Embedding::embed_at(const int32_t* ids, const int64_t* positions, int64_t N) {
  Tensor out = Tensor::empty({N, C_});  // (N, C)
  for (int64_t n = 0; n < N; ++n) {
    check(ids[n] >= 0 && ids[n] < V_, "token id ", ids[n], " out of range [0, ", V_, ")");
    check(positions[n] >= 0 && positions[n] < block_size_, "position ", positions[n], " exceeds block_size ", block_size_);
    const float* te = wte_->value().f32() + ids[n] * C_;
    const float* pe = wpe_->value().f32() + positions[n] * C_;
    for (int64_t c = 0; c < C_; ++c) out.f32()[n * C_ + c] = te[c] + pe[c];
  }
  return out;
}

Tensor Embedding::backward_impl(const Tensor& dy, Context& ctx) {
  const Tensor& idx = ctx.saved(this, 0);
  kernels::embedding_backward(wte_->grad().f32(), wpe_->grad().f32(), dy.f32(), idx.i32(), idx.size(0),
                              idx.size(1), C_);
  wte_->grad_contributed();
  wpe_->grad_contributed();
  ctx.release(this);
  return Tensor();
}

}  // namespace loom::nn
