// Metrics appended to <run dir>/metrics.jsonl, one JSON object per line (train and val
// records), readable by anything; and the human progress line.
#pragma once

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace loom::train {

class MetricsLog {
 public:
  // An empty path disables the file.
  explicit MetricsLog(const std::string& path);
  // Appends and flushes one line; loom::Error naming the file when it cannot (a full disk).
  void write(const nlohmann::json& record);

 private:
  std::string path_;
  std::ofstream out_;
};

// "1m23s", "45s", "2h05m"
std::string format_duration(double seconds);

}  // namespace loom::train
