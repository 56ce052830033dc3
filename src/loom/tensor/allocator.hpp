// Host memory for tensor storage, with a cache of freed large blocks. A training step
// allocates the same activation sizes every time; without the cache each one is a fresh
// mmap whose pages the kernel must fault in and zero (a fifth of a gpt2-small step was
// spent in clear_page before this). Blocks are reused only at their exact rounded size, and
// the cache never holds more than the process's peak of live tensor bytes.
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
