#include "loom/comm/collective_temporaries.hpp"

#include <malloc.h>

#include <cstdlib>
#include <string_view>

namespace loom::comm {

namespace {

bool user_chose_thresholds() {
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr || std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr)
    return true;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables == nullptr) return false;
  const std::string_view t(tunables);
  return t.find("mmap_threshold") != std::string_view::npos || t.find("trim_threshold") != std::string_view::npos;
}

std::string& report() {
  static std::string line;
  return line;
}

}  // namespace

void reuse_collective_temporaries() {
  if (user_chose_thresholds()) {
    report() = "malloc's thresholds left as the environment set them";
    return;
  }
  // Setting either disables glibc's adaptive threshold, so both are set together.
  const bool ok = mallopt(M_MMAP_THRESHOLD, static_cast<int>(kCollectiveMmapThreshold)) == 1 &&
                  mallopt(M_TRIM_THRESHOLD, static_cast<int>(kCollectiveTrimThreshold)) == 1;
  report() = ok ? "MPI's collective temporaries under " + std::to_string(kCollectiveMmapThreshold >> 20) +
                      " MiB reuse malloc's heap (no fresh mapping per call)"
                : "malloc refused the collectives' thresholds: their temporaries stay fresh mappings";
}

std::string collective_temporaries_report() { return report(); }

}  // namespace loom::comm
