#include "loom/train/metrics_log.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "loom/error.hpp"

namespace loom::train {

namespace {
// A run killed while it wrote a record leaves a partial last line; the next run appending to
// the file would glue its first record onto it, and every reader would then fail at that
// line. The fragment is no record (it never ended): it goes before anything is appended.
void drop_partial_last_line(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in.good()) return;
  const std::streamoff size = in.tellg();
  if (size <= 0) return;
  std::streamoff keep = size;
  char c = 0;
  while (keep > 0) {
    in.seekg(keep - 1);
    in.get(c);
    if (c == '\n') break;
    --keep;
  }
  if (keep == size) return;
  in.close();
  std::error_code ec;
  std::filesystem::resize_file(path, static_cast<std::uintmax_t>(keep), ec);
}
}  // namespace

MetricsLog::MetricsLog(const std::string& path) : path_(path) {
  if (path.empty()) return;
  drop_partial_last_line(path);
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
