#include "loom/train/resume_auto.hpp"

#include <algorithm>
#include <filesystem>

#include "loom/error.hpp"
#include "loom/train/checkpoint.hpp"

namespace loom::train {

namespace fs = std::filesystem;

AutoResume find_newest_complete_checkpoint(const std::string& dir) {
  AutoResume out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string n = entry.path().filename().string();
    if (n.rfind("checkpoint-", 0) == 0 && entry.path().extension() == ".safetensors" && entry.is_regular_file())
      names.push_back(n);
  }
  // Zero-padded steps: the name order is the step order.
  std::sort(names.rbegin(), names.rend());
  for (const std::string& n : names) {
    const std::string path = (fs::path(dir) / n).string();
    try {
      read_checkpoint_info(path);  // reads every tensor and verifies the checksum
      out.path = fs::canonical(path).string();
      return out;
    } catch (const Error& e) {
      out.skipped.push_back(e.what());
    }
  }
  return out;
}

}  // namespace loom::train
