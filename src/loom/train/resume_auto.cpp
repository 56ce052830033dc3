#include "loom/train/resume_auto.hpp"

#include <algorithm>
#include <filesystem>

#include "loom/error.hpp"
#include "loom/train/checkpoint.hpp"
#include "loom/train/sharded_checkpoint.hpp"

namespace loom::train {

namespace fs = std::filesystem;

namespace {

// Reads the whole checkpoint: a single file with its checksum, or a sharded one's manifest
// and every piece with theirs.
void verify_checkpoint(const std::string& path) {
  CheckpointReader reader(path);
  if (reader.sharded()) read_full_state(reader);
}

}  // namespace

AutoResume find_newest_complete_checkpoint(const std::string& dir) {
  AutoResume out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  // Single files and sharded directories; unfinished writes (".tmp") are never candidates.
  std::vector<std::pair<int64_t, std::string>> candidates;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string n = entry.path().filename().string();
    const int64_t step = checkpoint_step(n);
    const bool file = entry.is_regular_file() && entry.path().extension() == ".safetensors";
    if (step >= 0 && !n.ends_with(".tmp") && (file || entry.is_directory())) candidates.emplace_back(step, n);
  }
  std::sort(candidates.rbegin(), candidates.rend());
  for (const auto& [step, n] : candidates) {
    const std::string path = (fs::path(dir) / n).string();
    try {
      verify_checkpoint(path);
      out.path = fs::canonical(path).string();
      return out;
    } catch (const Error& e) {
      out.skipped.push_back(e.what());
    }
  }
  return out;
}

}  // namespace loom::train
