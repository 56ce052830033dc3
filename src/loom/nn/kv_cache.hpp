// The keys and values of every token generated so far, per block and head, so a decode
// step computes attention for its one new token without re-running the context. A cache
// has `slots`: each holds one sequence of up to block_size tokens; sequences of a batch
// sit in different slots, and a slot freed by a finished sequence takes a new one.
// Under tensor parallelism each rank caches its own heads.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/kernels/cached_attention.hpp"
#include "loom/nn/gpt.hpp"

namespace loom::nn {

class KVCache {
 public:
  KVCache(GPT& model, int64_t slots);

  int64_t slots() const { return geometry_.slots; }
  int64_t capacity() const { return geometry_.capacity; }  // tokens per slot: block_size
  int64_t length(int64_t slot) const { return lengths_.at(static_cast<size_t>(slot)); }
  // Forgets the slot's tokens (a new sequence starts there).
  void clear(int64_t slot) { lengths_.at(static_cast<size_t>(slot)) = 0; }
  // The next position of the slot, counted as filled (its keys and values must be written).
  int64_t claim_position(int64_t slot);
  const kernels::CacheGeometry& geometry() const { return geometry_; }
  float* keys(int64_t block) { return keys_[static_cast<size_t>(block)].f32(); }
  float* values(int64_t block) { return values_[static_cast<size_t>(block)].f32(); }
  // Bytes one decode step reads for a sequence of `length` tokens (keys and values of every block).
  int64_t bytes_read(int64_t length) const;

 private:
  kernels::CacheGeometry geometry_;
  std::vector<int64_t> lengths_;
  std::vector<Tensor> keys_, values_;  // per block (slots, NH, capacity, HS)
};

}  // namespace loom::nn
