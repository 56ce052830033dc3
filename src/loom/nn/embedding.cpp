#include "loom/nn/embedding.hpp"

#include "loom/error.hpp"
#include "loom/kernels/embedding.hpp"

namespace loom::nn {

Embedding::Embedding(int64_t vocab_size, int64_t padded_vocab_size, int64_t block_size, int64_t C)
    : V_(vocab_size), block_size_(block_size), C_(C) {
  wte_ = &register_parameter("wte", {padded_vocab_size, C}, /*weight_decay=*/true);
  wte_->set_padded_past_row(vocab_size);  // rows of the full table (vocab_size is the whole vocabulary under tp too)
  wpe_ = &register_parameter("wpe", {block_size, C}, /*weight_decay=*/true);
}

namespace {

// Runs of consecutive positions: {first row, first position, rows}.
struct Run {
  int64_t row, position, length;
};

std::vector<Run> runs_of(const std::vector<int64_t>& positions) {
  std::vector<Run> runs;
  for (int64_t i = 0; i < static_cast<int64_t>(positions.size()); ++i) {
    if (!runs.empty() && positions[static_cast<size_t>(i)] == runs.back().position + runs.back().length)
      ++runs.back().length;
    else
      runs.push_back({i, positions[static_cast<size_t>(i)], 1});
  }
  return runs;
}

}  // namespace

std::vector<int64_t> Embedding::positions(int64_t T) const {
  std::vector<int64_t> out;
  if (position_map_) {
    out = position_map_(T);
    check(static_cast<int64_t>(out.size()) == T, "position map gave ", out.size(), " positions for ", T, " rows");
  } else {
    for (int64_t t = 0; t < T; ++t) out.push_back(t);
  }
  for (int64_t p : out) check(p >= 0 && p < block_size_, "position ", p, " outside block_size ", block_size_);
  return out;
}

Tensor Embedding::forward_impl(const Tensor& idx, Context& ctx) {
  check(idx.ndim() == 2 && idx.dtype() == DType::I32, "embedding expects (B, T) token ids, got ",
        shape_str(idx.shape()), " ", dtype_name(idx.dtype()));
  const int64_t B = idx.size(0), T = idx.size(1);
  check(T <= block_size_, "sequence length ", T, " exceeds block_size ", block_size_);
  Tensor out = Tensor::empty({B, T, C_});  // (B, T, C)
  const std::vector<Run> runs = runs_of(positions(T));
  if (runs.size() == 1 && runs[0].position == 0) {  // the whole sequence: one call over the batch
    kernels::embedding_forward(out.f32(), idx.i32(), wte_->value().f32(), wpe_->value().f32(), B, T, C_, V_);
  } else {
    for (int64_t b = 0; b < B; ++b)
      for (const Run& r : runs)
        kernels::embedding_forward(out.f32() + (b * T + r.row) * C_, idx.i32() + b * T + r.row, wte_->value().f32(),
                                   wpe_->value().f32() + r.position * C_, 1, r.length, C_, V_);
  }
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
  const int64_t B = idx.size(0), T = idx.size(1);
  const std::vector<Run> runs = runs_of(positions(T));
  if (runs.size() == 1 && runs[0].position == 0) {
    kernels::embedding_backward(wte_->grad().f32(), wpe_->grad().f32(), dy.f32(), idx.i32(), B, T, C_);
  } else {
    for (int64_t b = 0; b < B; ++b)
      for (const Run& r : runs)
        kernels::embedding_backward(wte_->grad().f32(), wpe_->grad().f32() + r.position * C_,
                                    dy.f32() + (b * T + r.row) * C_, idx.i32() + b * T + r.row, 1, r.length, C_);
  }
  wte_->grad_contributed();
  wpe_->grad_contributed();
  ctx.release(this);
  return Tensor();
}

}  // namespace loom::nn
