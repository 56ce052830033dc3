// malloc's thresholds (tensor/malloc_reuse.hpp): after reuse_freed_memory(), a buffer of a
// collective's temporary's size that is freed and allocated again keeps its pages, on the
// main thread and on another one (MPI's temporaries are the communication thread's), where a
// fresh mapping of that size faults every page in (glibc's default for it, and what each call
// of a non-blocking collective paid).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <cstdlib>
#include <string>
#include <thread>

#include "loom/tensor/malloc_reuse.hpp"

namespace loom {
namespace {

constexpr size_t kBytes = size_t{16} << 20;  // a 4096 x 1024 fp32 gradient block

long minor_faults_of_this_thread() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_minflt;
}

// The minor faults of writing one byte in each page of p.
long faults_touching(volatile char* p) {
  const long before = minor_faults_of_this_thread();
  for (size_t i = 0; i < kBytes; i += 4096) p[i] = 1;
  return minor_faults_of_this_thread() - before;
}

// What a fresh mapping costs here: a fault a 4 KiB page.
long fresh_mapping_faults() {
  void* fresh = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (fresh == MAP_FAILED) return -1;
  madvise(fresh, kBytes, MADV_NOHUGEPAGE);
  const long faults = faults_touching(static_cast<char*>(fresh));
  munmap(fresh, kBytes);
  return faults;
}

// A collective's temporary: allocated, written, freed; then the next call's. The faults of the
// second.
long faults_of_a_reallocated_buffer() {
  auto* first = static_cast<char*>(std::malloc(kBytes));
  if (first == nullptr) return -1;
  faults_touching(first);
  std::free(first);
  auto* second = static_cast<char*>(std::malloc(kBytes));
  if (second == nullptr) return -1;
  const long faults = faults_touching(second);
  std::free(second);
  return faults;
}

TEST(MallocReuse, AFreedBufferComesBackWithItsPagesOnEveryThread) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's malloc has no mmap threshold";
#endif
  if (malloc_thresholds_from_environment()) GTEST_SKIP() << "malloc's thresholds are set by the environment";
  reuse_freed_memory();
  EXPECT_NE(malloc_reuse_report().find("from its heaps"), std::string::npos) << malloc_reuse_report();

  const long fresh = fresh_mapping_faults();
  ASSERT_GT(fresh, 1000) << "a 16 MiB mapping of 4 KiB pages";
  const long main_thread = faults_of_a_reallocated_buffer();
  long other_thread = -1;
  std::thread([&other_thread] { other_thread = faults_of_a_reallocated_buffer(); }).join();
  ASSERT_GE(main_thread, 0);
  ASSERT_GE(other_thread, 0);
  EXPECT_LT(4 * main_thread, fresh) << "main thread: the second buffer faulted " << main_thread << " times";
  EXPECT_LT(4 * other_thread, fresh) << "another thread: the second buffer faulted " << other_thread << " times";
}

}  // namespace
}  // namespace loom
