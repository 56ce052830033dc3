// How context parallelism splits a sequence over the cp ranks (docs/architecture.md). The
// sequence is cut into 2·cp chunks and every rank holds two. Zig-zag (the default): rank r
// holds chunks r and 2·cp−1−r, so under the causal mask every rank attends over the same
// number of (query, key) pairs. Contiguous: rank r holds chunks 2r and 2r+1, the plain split,
// kept so the imbalance it causes (the last rank does ~2·cp/(cp+1) the average) can be measured.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "loom/tensor/tensor.hpp"

namespace loom::parallel::cp {

enum class Split { ZigZag, Contiguous };

// "zigzag" or "contiguous"; loom::Error naming the choices otherwise.
Split parse_split(const std::string& name);

// The global chunk indices (of 2·cp) that cp rank `rank` holds, in the order of its rows.
std::array<int64_t, 2> chunks_of(int rank, int cp, Split split);

// The true position of each of this rank's T/cp rows in a sequence of T tokens.
std::vector<int64_t> positions_of(int64_t T, int rank, int cp, Split split);

// This rank's columns of a (B, T, ...) tensor: (B, T/cp, ...), its two chunks in order.
// T must be divisible by 2·cp (loom::Error naming both otherwise).
Tensor take_chunks(const Tensor& sequence, int rank, int cp, Split split);

// Query/key pairs rank `rank` scores under the causal mask for a sequence of T tokens: its
// attention work (the zig-zag balance is checked with it).
int64_t causal_pairs(int64_t T, int rank, int cp, Split split);

}  // namespace loom::parallel::cp
