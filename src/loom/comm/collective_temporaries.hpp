// Where MPI's collectives get their temporary buffers. Open MPI's non-blocking collectives
// (libnbc) malloc a temporary the size of the whole message on every call and free it when
// the collective ends: a reduce-scatter over the 3D grid's depth axis holds the full weight
// gradient block. Above glibc's mmap threshold (128 KiB, adapting up to 32 MiB) each such
// buffer is a fresh mapping whose pages the kernel faults in and zeroes during the copy into
// it, and unmaps afterwards: on grid 1,1,4 of a 1024-wide model (16 MiB blocks, 4 ranks on 2
// cores) that was 12% of the cores' time in page faults, and the step took 15-20% longer.
// A multi-rank run therefore serves allocations below kCollectiveMmapThreshold from malloc's
// heap, where freed buffers are reused with their pages in place.
#pragma once

#include <cstdint>
#include <string>

namespace loom::comm {

constexpr int64_t kCollectiveMmapThreshold = int64_t{128} << 20;
// The heap's free top is returned to the system only beyond this (glibc's own rule: twice the
// mmap threshold), which bounds what a process keeps after a large collective.
constexpr int64_t kCollectiveTrimThreshold = 2 * kCollectiveMmapThreshold;

// Applies the two thresholds with mallopt, unless the user already chose malloc's thresholds
// (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ or GLIBC_TUNABLES naming either): then it
// leaves them. MpiRuntime calls it when the world has more than one rank.
void reuse_collective_temporaries();

// For the log: what reuse_collective_temporaries() did; "" when it has not run.
std::string collective_temporaries_report();

}  // namespace loom::comm
