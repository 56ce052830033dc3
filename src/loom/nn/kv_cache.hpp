// The keys and values of every token generated so far, per block and head, so a decode
// step computes attention for its one new token without re-running the context. A cache
// has `slots`: each holds one sequence of up to block_size tokens; sequences of a batch
// sit in different slots, and a slot freed by a finished sequence takes a new one.
// Under tensor parallelism each rank caches its own heads. In bf16 compute precision the
// cache is bf16: the attention reads keys and values rounded to bf16 anyway, so half the
// bytes hold the same values (and a decode step reads half as many).
#pragma once

#include <cstdint>
#include <vector>

#include "loom/kernels/cached_attention.hpp"
#include "loom/nn/gpt.hpp"

namespace loom::nn {

class KVCache {
 public:
  // dtype: bf16 when the compute precision is bf16 (precision.hpp), else fp32; an fp32 cache
  // also serves bf16 decoding (its values rounded to bf16 and kept widened).
  KVCache(GPT& model, int64_t slots);
  KVCache(GPT& model, int64_t slots, DType dtype);

  int64_t slots() const { return geometry_.slots; }
  int64_t capacity() const { return geometry_.capacity; }  // tokens per slot: block_size
  int64_t length(int64_t slot) const { return lengths_.at(static_cast<size_t>(slot)); }
  // Forgets the slot's tokens (a new sequence starts there).
  void clear(int64_t slot) { lengths_.at(static_cast<size_t>(slot)) = 0; }
  // The next position of the slot, counted as filled (its keys and values must be written).
  int64_t claim_position(int64_t slot);
  const kernels::CacheGeometry& geometry() const { return geometry_; }
  DType dtype() const { return dtype_; }
  // Block b's keys and values, (slots, NH, capacity, HS) each, in dtype().
  const Tensor& keys(int64_t block) const { return keys_.at(static_cast<size_t>(block)); }
  const Tensor& values(int64_t block) const { return values_.at(static_cast<size_t>(block)); }
  // Bytes one decode step reads for a sequence of `length` tokens (keys and values of every block).
  int64_t bytes_read(int64_t length) const;

 private:
  kernels::CacheGeometry geometry_;
  DType dtype_;
  std::vector<int64_t> lengths_;
  std::vector<Tensor> keys_, values_;  // per block (slots, NH, capacity, HS)
};

}  // namespace loom::nn
