// Each test process, or each MPI test job, gets a temporary directory of its own, which
// TMPDIR points at and which is removed when the run ends. Tests name their directories under
// std::filesystem::temp_directory_path() ("loom_reshard_np2"), and two runs side by side (the
// sanitizer build's run of the same tests next to CTest's own cases, another checkout's
// tests) must not remove or overwrite each other's checkpoints.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace loom::testing {

class PrivateTempDir {
 public:
  // The directory for a run whose deciding process has pid `pid`.
  static std::filesystem::path path_for(const std::string& kind, long pid) {
    return std::filesystem::temp_directory_path() / (kind + "-" + std::to_string(pid));
  }
  // Creates `path` (every process of a job may) and points TMPDIR at it; the owner removes it
  // at the end.
  PrivateTempDir(std::filesystem::path path, bool owner) : path_(std::move(path)), owner_(owner) {
    std::filesystem::create_directories(path_);
    ::setenv("TMPDIR", path_.c_str(), 1);
  }
  ~PrivateTempDir() {
    std::error_code ignored;
    if (owner_) std::filesystem::remove_all(path_, ignored);
  }
  PrivateTempDir(const PrivateTempDir&) = delete;
  PrivateTempDir& operator=(const PrivateTempDir&) = delete;

 private:
  std::filesystem::path path_;
  bool owner_;
};

}  // namespace loom::testing
