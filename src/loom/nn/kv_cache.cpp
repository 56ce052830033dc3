#include "loom/nn/kv_cache.hpp"

#include "loom/error.hpp"
#include "loom/kernels/precision.hpp"

namespace loom::nn {

KVCache::KVCache(GPT& model, int64_t slots)
    : KVCache(model, slots, kernels::compute_precision() == kernels::Precision::BF16 ? DType::BF16 : DType::F32) {}

KVCache::KVCache(GPT& model, int64_t slots, DType dtype) : dtype_(dtype) {
  check(dtype == DType::F32 || dtype == DType::BF16, "a KV cache holds fp32 or bf16 values");
  check(slots >= 1, "a KV cache needs at least one slot, got ", slots);
  check(model.has_embedding() && model.has_head(), "generation needs the whole model (no pipeline stages)");
  const GPTConfig& c = model.config();
  const int64_t t = model.layers().tensor_parallel_size();
  geometry_ = {slots, c.n_head / t, c.block_size, c.n_embd / c.n_head};
  lengths_.assign(static_cast<size_t>(slots), 0);
  const Shape shape{slots, geometry_.NH, geometry_.capacity, geometry_.HS};
  for (size_t b = 0; b < model.blocks().size(); ++b) {
    keys_.push_back(Tensor::empty(shape, dtype, MemoryCategory::Activations));
    values_.push_back(Tensor::empty(shape, dtype, MemoryCategory::Activations));
  }
}

int64_t KVCache::claim_position(int64_t slot) {
  int64_t& n = lengths_.at(static_cast<size_t>(slot));
  check(n < capacity(), "the KV cache slot ", slot, " is full (", capacity(), " tokens = block_size)");
  return n++;
}

int64_t KVCache::bytes_read(int64_t length) const {
  return 2 * static_cast<int64_t>(keys_.size()) * geometry_.NH * length * geometry_.HS *
         static_cast<int64_t>(dtype_size(dtype_));
}

}  // namespace loom::nn
