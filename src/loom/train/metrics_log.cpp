#include "loom/train/metrics_log.hpp"

#include <cstdio>

#include "loom/error.hpp"

namespace loom::train {

MetricsLog::MetricsLog(const std::string& path) {
  if (path.empty()) return;
  out_.open(path, std::ios::app);
  check(out_.good(), "cannot open metrics file '", path, "'");
}

void MetricsLog::write(const nlohmann::json& record) {
  if (!out_.is_open()) return;
  out_ << record.dump() << '\n';
  out_.flush();
}

std::string format_duration(double seconds) {
  const auto s = static_cast<long long>(seconds + 0.5);
  char buf[32];
  if (s < 60) std::snprintf(buf, sizeof buf, "%llds", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, (s % 3600) / 60);
  return buf;
}

}  // namespace loom::train
