#include "loom/train/metrics_log.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "loom/error.hpp"

namespace loom::train {

MetricsLog::MetricsLog(const std::string& path) : path_(path) {
  if (path.empty()) return;
  out_.open(path, std::ios::app);
  check(out_.good(), "cannot open metrics file '", path, "': ", std::strerror(errno));
}

void MetricsLog::write(const nlohmann::json& record) {
  if (!out_.is_open()) return;
  errno = 0;
  out_ << record.dump() << '\n';
  out_.flush();
  // A full disk fails the run here, at the first record it could not keep.
  check(out_.good(), "cannot write metrics file '", path_, "': ", errno != 0 ? std::strerror(errno) : "write failed");
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
