// How many heads ring attention multiplies at once: its rule, and the memory count's
// (plan/tensor_parallel_3d_memory.cpp) for the score scratch it sizes.
#pragma once

#include <algorithm>
#include <cstdint>

namespace loom::parallel::cp {

// Heads per block product. The products' score scratch (B x heads x Tc x Tc floats for
// chunks of Tc rows, twice in backward) grows as the square of the chunk; heads go in groups
// small enough that it stays within the rank's own qkv (B x 2Tc x 3C floats) while one head
// allows it, so a rank's memory keeps falling as 1/cp at long context: 6C / Tc heads, at
// least 1, at most NH.
inline int64_t heads_per_group(int64_t Tc, int64_t C, int64_t NH) {
  return std::clamp<int64_t>(Tc > 0 ? 6 * C / Tc : NH, 1, NH);
}

}  // namespace loom::parallel::cp
