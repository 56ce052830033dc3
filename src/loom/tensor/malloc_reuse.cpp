#include "loom/tensor/malloc_reuse.hpp"

#include <malloc.h>

#include <cstdlib>
#include <string_view>

namespace loom {

bool malloc_thresholds_from_environment() {
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr || std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr)
    return true;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables == nullptr) return false;
  const std::string_view t(tunables);
  return t.find("mmap_threshold") != std::string_view::npos || t.find("trim_threshold") != std::string_view::npos;
}

namespace {

std::string& report_line() {
  static std::string line;
  return line;
}

}  // namespace

void reuse_freed_memory() {
#if defined(__SANITIZE_ADDRESS__)
  report_line() = "malloc's thresholds not set: AddressSanitizer's malloc has none";
  return;
#endif
  if (malloc_thresholds_from_environment()) {
    report_line() = "malloc's thresholds left as the environment set them";
    return;
  }
  // Setting either disables glibc's adaptive threshold; each is set on its own, so a refusal
  // of one leaves the other.
  int64_t mmap_threshold = kMmapThreshold;
  if (mallopt(M_MMAP_THRESHOLD, static_cast<int>(mmap_threshold)) != 1) {
    mmap_threshold = kOlderGlibcMmapLimit;
    if (mallopt(M_MMAP_THRESHOLD, static_cast<int>(mmap_threshold)) != 1) mmap_threshold = 0;
  }
  const bool trim = mallopt(M_TRIM_THRESHOLD, static_cast<int>(kTrimThreshold)) == 1;
  if (mmap_threshold == 0 || !trim) {
    report_line() = "malloc refused Loom's thresholds: freed buffers may come back as fresh mappings";
    return;
  }
  report_line() = "malloc serves blocks under " + std::to_string(mmap_threshold >> 20) +
                  " MiB from its heaps (MPI's collective temporaries reuse their pages)";
}

std::string malloc_reuse_report() { return report_line(); }

}  // namespace loom
