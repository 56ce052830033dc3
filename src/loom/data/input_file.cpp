#include "loom/data/input_file.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "loom/error.hpp"
#include "loom/tensor/memory_tracker.hpp"

namespace loom::data {

namespace {

std::string kind_of(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

std::string file_kind(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return kind_of(st.st_mode);
  return errno == ELOOP ? "a symbolic link loop" : "missing";
}

int64_t check_input_file(const std::string& path, const std::string& what, int64_t max_bytes) {
  struct stat st {};
  // stat, not open: opening a FIFO blocks until a writer appears.
  const int error = ::stat(path.c_str(), &st) == 0 ? 0 : errno;
  check(error == 0, "cannot open ", what, " '", path, "': ", std::strerror(error));
  check(S_ISREG(st.st_mode), what, " '", path, "' is ", kind_of(st.st_mode), ", not a regular file");
  const auto bytes = static_cast<int64_t>(st.st_size);
  check(max_bytes < 0 || bytes <= max_bytes, what, " '", path, "' is ", format_bytes(bytes), " (", bytes,
        " bytes), more than the limit of ", format_bytes(max_bytes));
  return bytes;
}

}  // namespace loom::data
