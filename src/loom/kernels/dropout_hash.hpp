// The counter-based hash every dropout mask in Loom is drawn from: element `index` of the
// tensor drawn under `key` is kept when the top 24 bits of mix(key + index), as a fraction of
// 2^24, are at least p. The mask is a pure function of (key, index), so it needs no state to
// save and is the same for any thread count, after a resume and on whichever rank holds it.
#pragma once

#include <cstdint>

namespace loom::kernels {

// SplitMix64's finaliser: consecutive counters give independent-looking 64-bit values.
inline uint64_t dropout_mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The 24-bit threshold of probability p: an element is dropped below it.
inline uint64_t dropout_threshold(float p) { return static_cast<uint64_t>(static_cast<double>(p) * 16777216.0); }

inline bool dropout_keeps(uint64_t key, uint64_t index, uint64_t threshold) {
  return (dropout_mix(key + index) >> 40) >= threshold;
}

}  // namespace loom::kernels
