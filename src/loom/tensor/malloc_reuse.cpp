#include "loom/tensor/malloc_reuse.hpp"

#include <malloc.h>

#include <cstdlib>
#include <string_view>

namespace loom {

namespace {

bool user_chose_thresholds() {
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr || std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr)
    return true;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables == nullptr) return false;
  const std::string_view t(tunables);
  return t.find("mmap_threshold") != std::string_view::npos || t.find("trim_threshold") != std::string_view::npos;
}

std::string& report_line() {
  static std::string line;
  return line;
}

}  // namespace

void reuse_freed_memory() {
  if (user_chose_thresholds()) {
    report_line() = "malloc's thresholds left as the environment set them";
    return;
  }
  // Setting either disables glibc's adaptive threshold, so both are set together.
  const bool ok = mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMmapThreshold)) == 1 &&
                  mallopt(M_TRIM_THRESHOLD, static_cast<int>(kTrimThreshold)) == 1;
  report_line() = ok ? "malloc serves blocks under " + std::to_string(kMmapThreshold >> 20) +
                      " MiB from its heap (MPI's collective temporaries reuse their pages)"
                : "malloc refused Loom's thresholds: freed buffers are fresh mappings again";
}

std::string malloc_reuse_report() { return report_line(); }

}  // namespace loom
