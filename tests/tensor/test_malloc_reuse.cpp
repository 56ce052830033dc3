// malloc's thresholds (tensor/malloc_reuse.hpp): after reuse_freed_memory(), a buffer of a
// collective's temporary's size that is freed and allocated again keeps its pages, where a
// fresh mapping of that size faults every page in (glibc's default for it, and what each call
// of a non-blocking collective paid).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <cstdlib>

#include "loom/tensor/malloc_reuse.hpp"

namespace loom {
namespace {

constexpr size_t kBytes = size_t{16} << 20;  // a 4096 x 1024 fp32 gradient block

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// The minor faults of writing one byte in each page of p.
long faults_touching(volatile char* p) {
  const long before = minor_faults();
  for (size_t i = 0; i < kBytes; i += 4096) p[i] = 1;
  return minor_faults() - before;
}

TEST(MallocReuse, AFreedBufferComesBackWithItsPages) {
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_") || std::getenv("GLIBC_TUNABLES"))
    GTEST_SKIP() << "malloc's thresholds are set by the environment";
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's malloc has no mmap threshold";
#endif
  reuse_freed_memory();
  EXPECT_NE(malloc_reuse_report().find("from its heap"), std::string::npos) << malloc_reuse_report();

  // What a fresh mapping costs here (pages of 4 KiB, or fewer faults with huge pages).
  void* fresh = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(fresh, MAP_FAILED);
  const long fresh_faults = faults_touching(static_cast<char*>(fresh));
  munmap(fresh, kBytes);
  ASSERT_GT(fresh_faults, 0);

  // A collective's temporary: allocated, written, freed; then the next call's.
  auto* first = static_cast<char*>(std::malloc(kBytes));
  ASSERT_NE(first, nullptr);
  faults_touching(first);
  std::free(first);
  auto* second = static_cast<char*>(std::malloc(kBytes));
  ASSERT_NE(second, nullptr);
  const long reused_faults = faults_touching(second);
  std::free(second);
  EXPECT_LT(4 * reused_faults, fresh_faults) << "the second buffer faulted " << reused_faults
                                             << " times, a fresh mapping " << fresh_faults;
}

}  // namespace
}  // namespace loom
