#include "loom/data/output_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "loom/error.hpp"

namespace loom::data {

namespace {

void fsync_path(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

void sync_directory(const std::string& path) { fsync_path(path, O_RDONLY | O_DIRECTORY); }

void write_file_atomically(const std::string& path, const std::string& bytes) {
  write_file_atomically(path, std::vector<std::string_view>{bytes});
}

void write_file_atomically(const std::string& path, const std::vector<std::string_view>& parts) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  // A target that is no regular file (a device such as /dev/full, a FIFO, a link to one) has
  // nothing to replace: it is written as it is.
  std::error_code ec;
  const fs::file_status status = fs::status(target, ec);
  if (fs::exists(status) && !fs::is_regular_file(status)) {
    std::ofstream out(path, std::ios::binary);
    check(out.good(), "cannot open '", path, "': ", std::strerror(errno));
    errno = 0;
    for (const std::string_view part : parts) out.write(part.data(), static_cast<std::streamsize>(part.size()));
    out.close();
    check(!out.fail(), "cannot write '", path, "': ", errno != 0 ? std::strerror(errno) : "write failed");
    return;
  }
  std::string tmp_name = ".";  // appended, not `"." + ...`: GCC 12's -Wrestrict misreads that here
  tmp_name += target.filename().string();
  tmp_name += ".tmp.";
  tmp_name += std::to_string(::getpid());
  const std::string tmp = (dir / tmp_name).string();
  {
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    check(fd >= 0, "cannot create '", tmp, "': ", std::strerror(errno));
    for (const std::string_view part : parts) {
      size_t written = 0;
      while (written < part.size()) {
        const ssize_t n = ::write(fd, part.data() + written, part.size() - written);
        if (n < 0) {
          const int err = errno;
          ::close(fd);
          ::unlink(tmp.c_str());
          fail("cannot write '", path, "': ", std::strerror(err));
        }
        written += static_cast<size_t>(n);
      }
    }
    const bool synced = ::fsync(fd) == 0;
    const int err = errno;
    ::close(fd);
    if (!synced) {
      ::unlink(tmp.c_str());
      fail("cannot sync '", path, "': ", std::strerror(err));
    }
  }
  // Fault injection for tests/faults/crash_resume.py: die as a crash would, with the data
  // written but not yet renamed into place.
  if (const char* at = std::getenv("LOOM_TEST_CRASH_BEFORE_RENAME"); at != nullptr && *at != '\0' &&
      path.find(at) != std::string::npos)
    ::raise(SIGKILL);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail("cannot rename '", tmp, "' to '", path, "': ", std::strerror(err));
  }
  sync_directory(dir.string());
}

}  // namespace loom::data
