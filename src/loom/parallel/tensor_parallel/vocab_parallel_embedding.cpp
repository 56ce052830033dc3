#include "loom/parallel/tensor_parallel/vocab_parallel_embedding.hpp"

#include <cstring>

#include "loom/error.hpp"
#include "loom/parallel/tensor_parallel/mappings.hpp"

namespace loom::parallel::tp {

namespace {
int64_t local_rows(int64_t padded_vocab, int t) {
  check(padded_vocab % t == 0, "padded vocabulary (", padded_vocab, ") must be divisible by tp (", t, ")");
  return padded_vocab / t;
}
}  // namespace

VocabParallelEmbedding::VocabParallelEmbedding(int64_t vocab_size, int64_t padded_vocab_size, int64_t block_size,
                                               int64_t C, comm::ProcessGroup& group, bool sequence_parallel)
    : nn::Embedding(vocab_size, local_rows(padded_vocab_size, group.size()), block_size, C),
      group_(group),
      vocab_begin_(group.rank() * local_rows(padded_vocab_size, group.size())),
      rows_(local_rows(padded_vocab_size, group.size())),
      sequence_parallel_(sequence_parallel) {
  wte().set_shard_spec(nn::ShardSpec{0, group.size(), group.rank(), 1});
}

Tensor VocabParallelEmbedding::forward_impl(const Tensor& idx, nn::Context& ctx) {
  check(idx.ndim() == 2 && idx.dtype() == DType::I32, "embedding expects (B, T) token ids, got ",
        shape_str(idx.shape()), " ", dtype_name(idx.dtype()));
  const int64_t B = idx.size(0), T = idx.size(1);
  check(T <= block_size_, "sequence length ", T, " exceeds block_size ", block_size_);
  const int32_t* ids = idx.i32();
  for (int64_t i = 0; i < B * T; ++i) check(ids[i] >= 0 && ids[i] < V_, "token id ", ids[i], " out of range [0, ", V_, ")");
  Tensor out = Tensor::zeros({B, T, C_});  // (B, T, C)
  const float* table = wte().value().f32();
  float* o = out.f32();
  for (int64_t i = 0; i < B * T; ++i) {
    const int64_t row = ids[i] - vocab_begin_;
    if (row >= 0 && row < rows_) std::memcpy(o + i * C_, table + row * C_, sizeof(float) * static_cast<size_t>(C_));
  }
  // Every token's row came from exactly one rank: the sum over the group is the lookup.
  if (sequence_parallel_)
    out = reduce_scatter_sequence(out, group_);  // (B, T/t, C)
  else
    g_forward(out, group_);
  const int64_t Tl = out.size(1), t0 = sequence_parallel_ ? group_.rank() * Tl : 0;  // rows held here
  const std::vector<int64_t> position = positions(T);  // of each row (context parallel: of the whole sequence)
  const float* pos = wpe().value().f32();
  o = out.f32();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tl; ++t)
      for (int64_t c = 0; c < C_; ++c) o[(b * Tl + t) * C_ + c] += pos[position[static_cast<size_t>(t0 + t)] * C_ + c];
  ctx.save(this, {idx});
  return out;
}

Tensor VocabParallelEmbedding::embed_at(const int32_t* ids, const int64_t* positions, int64_t N) {
  for (int64_t n = 0; n < N; ++n) {
    check(ids[n] >= 0 && ids[n] < V_, "token id ", ids[n], " out of range [0, ", V_, ")");
    check(positions[n] >= 0 && positions[n] < block_size_, "position ", positions[n], " exceeds block_size ", block_size_);
  }
  Tensor out = Tensor::zeros({N, C_});  // (N, C)
  const float* table = wte().value().f32();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t row = ids[n] - vocab_begin_;
    if (row >= 0 && row < rows_) std::memcpy(out.f32() + n * C_, table + row * C_, sizeof(float) * static_cast<size_t>(C_));
  }
  g_forward(out, group_);  // every token's row came from exactly one rank
  const float* pos = wpe().value().f32();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C_; ++c) out.f32()[n * C_ + c] += pos[positions[n] * C_ + c];
  return out;
}

Tensor VocabParallelEmbedding::backward_impl(const Tensor& dy, nn::Context& ctx) {
  const Tensor& idx = ctx.saved(this, 0);
  const int64_t B = idx.size(0), T = idx.size(1);
  const int32_t* ids = idx.i32();
  float* dwte = wte().grad().f32();
  float* dwpe = wpe().grad().f32();
  // Positions: from this rank's rows (under sequence parallelism a partial sum, completed
  // across tp like every replicated parameter's).
  const int64_t Tl = dy.size(1), t0 = sequence_parallel_ ? group_.rank() * Tl : 0;
  const std::vector<int64_t> position = positions(T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tl; ++t)
      for (int64_t c = 0; c < C_; ++c)
        dwpe[position[static_cast<size_t>(t0 + t)] * C_ + c] += dy.f32()[(b * Tl + t) * C_ + c];
  // Tokens: every position's gradient, in (b, t) order as the serial kernel sums them.
  const Tensor full = sequence_parallel_ ? gather_sequence(dy, group_) : dy;
  const float* g = full.f32();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t row = ids[b * T + t] - vocab_begin_;
      if (row >= 0 && row < rows_)
        for (int64_t c = 0; c < C_; ++c) dwte[row * C_ + c] += g[(b * T + t) * C_ + c];
    }
  wte().grad_contributed();
  wpe().grad_contributed();
  ctx.release(this);
  return Tensor();
}

}  // namespace loom::parallel::tp
