// The contiguous runs of a tensor-parallel piece (shard_spec.hpp) inside its full tensor,
// for code that maps pieces of one layout onto pieces of another (checkpoint re-sharding).
// A piece's runs come in increasing full offset.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/nn/shard_spec.hpp"

namespace loom::nn {

// n elements at local_offset of the piece lie at full_offset of the full tensor (flat, row-major).
struct ShardRun {
  int64_t local_offset;
  int64_t full_offset;
  int64_t n;
};

// The runs of the piece of shape `local` that spec cuts out of the full tensor.
std::vector<ShardRun> shard_runs(const Shape& local, const ShardSpec& spec);

}  // namespace loom::nn
