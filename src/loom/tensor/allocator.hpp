// Host memory for tensor storage, with a cache of freed large blocks. A training step
// allocates the same activation sizes every time; without the cache each one is a fresh
// mmap whose pages the kernel must fault in and zero (a fifth of a gpt2-small step was
// spent in clear_page before this). A request takes the smallest cached block that holds it
// with at most an eighth of the block to spare: a mixture of experts' routed rows change
// size every layer and step (an expert parallel rank's received rows, capacity's drops), and
// exact sizes would leave them a fresh mmap each time. The cache never holds more than the
// process's peak of live tensor bytes.
#pragma once

#include <cstdint>

namespace loom {

void* allocate_block(int64_t bytes);
void free_block(void* ptr, int64_t bytes);

// Bytes held in the cache (not counted by the MemoryTracker, which counts live tensors).
int64_t cached_block_bytes();
// Returns every cached block to the system.
void release_cached_blocks();

}  // namespace loom
