// Causal attention for generation with a KV cache: new tokens' queries against the keys and
// values of every earlier token of their own sequence, kept in a cache (one per layer) laid
// out (slots, NH, capacity, HS) so each head's keys and values are contiguous rows. Rows of
// one call may belong to different sequences (slots) at different positions: prefill (many
// tokens of one sequence) and a batched decode step (one token of each of several
// sequences) are the same call.
#pragma once

#include <cstdint>

#include "loom/tensor/dtype.hpp"

namespace loom::kernels {

struct CacheGeometry {
  int64_t slots = 0, NH = 0, capacity = 0, HS = 0;
  int64_t offset(int64_t slot, int64_t head, int64_t pos) const { return ((slot * NH + head) * capacity + pos) * HS; }
};

// Copies each row's k and v (from qkv (N, 3C) laid out [q | k | v], C = NH * HS) into the
// cache at (slots[n], positions[n]). In bf16 compute precision (precision.hpp) the values
// stored are rounded to bf16, as training's bf16 attention products read k and v: a bf16
// cache holds exactly those values in half the bytes (an fp32 one holds them widened).
void cache_append(float* keys, float* values, const float* qkv, const int64_t* slots, const int64_t* positions,
                  int64_t N, const CacheGeometry& g);
void cache_append(bfloat16* keys, bfloat16* values, const float* qkv, const int64_t* slots, const int64_t* positions,
                  int64_t N, const CacheGeometry& g);

// out (N, C) heads interleaved (NH, HS): row n attends with its query (in qkv) to cache
// positions [0, positions[n]] of slot slots[n], which must already hold their keys/values.
// The same arithmetic as training's attention (scale 1/sqrt(HS), softmax with fast_exp);
// in bf16 also its operands: the query and the unnormalised softmax weights rounded to bf16
// (the cache already is), the output row divided by their sum afterwards, products and sums in
// fp32, so cached and uncached bf16 decoding agree.
void cached_attention(float* out, const float* qkv, const float* keys, const float* values, const int64_t* slots,
                      const int64_t* positions, int64_t N, const CacheGeometry& g);
void cached_attention(float* out, const float* qkv, const bfloat16* keys, const bfloat16* values, const int64_t* slots,
                      const int64_t* positions, int64_t N, const CacheGeometry& g);

}  // namespace loom::kernels
