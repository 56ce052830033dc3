#include "loom/train/metrics_log.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "loom/error.hpp"

namespace loom::train {

namespace {
// A run killed while it wrote a record leaves a partial last line; the next run appending to
// the file would glue its first record onto it, and every reader would then fail at that
// line. The fragment is no record (it never ended): it goes before anything is appended. A
// last line that is a whole record but for its '\n' is kept and ended, as `loom report`
// reads it.
void drop_partial_last_line(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in.good()) return;
  const std::streamoff size = in.tellg();
  if (size <= 0) return;
  // The last line's start: the byte after the last '\n', found a block at a time from the end.
  std::streamoff keep = size;
  std::string block;
  for (bool found = false; keep > 0 && !found;) {
    const std::streamoff n = std::min<std::streamoff>(keep, 4096);
    block.resize(static_cast<size_t>(n));
    in.seekg(keep - n);
    in.read(block.data(), n);
    const size_t newline = block.rfind('\n');
    found = newline != std::string::npos;
    keep = found ? keep - n + static_cast<std::streamoff>(newline) + 1 : keep - n;
  }
  if (keep == size) return;
  std::string last(static_cast<size_t>(size - keep), '\0');
  in.clear();
  in.seekg(keep);
  in.read(last.data(), size - keep);
  in.close();
  if (nlohmann::json::accept(last)) {
    std::ofstream(path, std::ios::binary | std::ios::app) << '\n';
    return;
  }
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
