// malloc's thresholds for a Loom process. Two kinds of buffer are allocated and freed at the
// same sizes every step outside the tensor allocator's cache (allocator.hpp): tensors under
// its 1 MiB floor, and the temporaries of MPI's non-blocking collectives, which Open MPI
// allocates at the whole message's size on every call, on the communication thread (a depth
// reduce-scatter of the 3D grid holds a 16 MiB gradient block). Above glibc's mmap threshold
// (128 KiB, adapting up to 32 MiB) each is a fresh mapping whose pages the kernel faults in
// and zeroes, and unmaps afterwards; below it, freed memory at the top of the heap beyond the
// trim threshold goes back to the system and is faulted in again. Measured on 2 cores: grid
// 1,1,4 of a 1024-wide model spent 12% of the cores' time in page faults and its step took
// 15-20% longer; a 128-wide serial model's step took about 10% longer. So every Loom process
// serves allocations under kMmapThreshold from malloc's heaps: the main thread's, and a
// thread's own arena for what fits in one of its heaps (64 MiB each; larger blocks on other
// threads stay mappings).
#pragma once

#include <climits>
#include <cstdint>
#include <string>

namespace loom {

constexpr int64_t kMmapThreshold = int64_t{128} << 20;
// glibc's own rule: twice the mmap threshold. Free memory at the top of the main heap is
// returned beyond it; what is freed lower down stays with the process, for reuse.
constexpr int64_t kTrimThreshold = 2 * kMmapThreshold;
static_assert(kTrimThreshold <= INT_MAX, "mallopt takes an int");
// Older glibc refuses an mmap threshold above this (its adaptive maximum): the fallback.
constexpr int64_t kOlderGlibcMmapLimit = int64_t{32} << 20;

// Applies the two thresholds with mallopt (main() calls it first), unless the user already
// chose malloc's thresholds (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ or GLIBC_TUNABLES
// naming either): then it leaves them.
void reuse_freed_memory();

// Whether the environment sets malloc's thresholds (MALLOC_MMAP_THRESHOLD_,
// MALLOC_TRIM_THRESHOLD_, or GLIBC_TUNABLES naming either): reuse_freed_memory() leaves them.
bool malloc_thresholds_from_environment();

// For the log: what reuse_freed_memory() did; "" when it has not run.
std::string malloc_reuse_report();

}  // namespace loom
