#include "loom/kernels/threads.hpp"

#include <omp.h>

#include <algorithm>
#include <thread>

#include "loom/error.hpp"

namespace loom::kernels {

int64_t cpu_count() {
  return std::max<int64_t>({1, omp_get_num_procs(), static_cast<int64_t>(std::thread::hardware_concurrency())});
}

void check_thread_count(int64_t n) {
  const int64_t limit = kMaxThreadsPerCpu * cpu_count();
  check(n >= 0 && n <= limit, "threads (", n, ") must be between 0 (all cores) and ", limit, " (", kMaxThreadsPerCpu,
        " x the ", cpu_count(), " CPUs of this machine)");
}

void set_num_threads(int64_t n) {
  check_thread_count(n);
  omp_set_num_threads(n > 0 ? static_cast<int>(n) : omp_get_num_procs());
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace loom::kernels
