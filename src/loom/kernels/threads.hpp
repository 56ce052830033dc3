// The thread count every kernel (OpenMP loops and oneDNN) uses.
#pragma once

#include <cstdint>

namespace loom::kernels {

// More threads than this many per CPU is refused: such a count is a typo (OpenMP would try
// to start them all and crash), never a speed-up.
constexpr int64_t kMaxThreadsPerCpu = 4;

// n <= 0 means "all cores". Applies to this process. loom::Error when n is negative or more
// than kMaxThreadsPerCpu x the CPUs of the machine.
void set_num_threads(int64_t n);
int num_threads();
// The CPUs a thread count is bounded by: the machine's, or more when this process may use more.
int64_t cpu_count();
// loom::Error naming n and the bound unless 0 <= n <= kMaxThreadsPerCpu x cpu_count().
void check_thread_count(int64_t n);

}  // namespace loom::kernels
