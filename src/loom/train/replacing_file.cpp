#include "loom/train/replacing_file.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "loom/data/input_file.hpp"
#include "loom/error.hpp"

namespace loom::train {

namespace fs = std::filesystem;

ReplacingFile::ReplacingFile(std::string path, std::string what) : path_(std::move(path)), what_(std::move(what)) {
  const std::string kind = data::file_kind(path_);
  const bool replace = kind == "missing" || kind == "a regular file";
  writing_ = replace ? (fs::path(path_).parent_path() / ("." + fs::path(path_).filename().string() + ".tmp." +
                                                          std::to_string(::getpid())))
                           .string()
                     : path_;
  errno = 0;
  out_.open(writing_, std::ios::trunc);
  check(out_.good(), "cannot open ", what_, " '", writing_, "': ", errno != 0 ? std::strerror(errno) : "open failed");
  errno = 0;  // a failed write sets it, whether the stream flushes then or in commit()
}

ReplacingFile::~ReplacingFile() {
  if (committed_ || writing_ == path_) return;
  out_.close();
  std::error_code ec;
  fs::remove(writing_, ec);
}

void ReplacingFile::commit() {
  out_.close();  // the data reaches the disk (or fails to) here, not in the destructor
  check(!out_.fail(), "cannot write ", what_, " '", path_, "': ", errno != 0 ? std::strerror(errno) : "write failed");
  if (writing_ != path_) {
    std::error_code ec;
    fs::rename(writing_, path_, ec);
    check(!ec, "cannot put ", what_, " '", path_, "' in place: ", ec.message());
  }
  committed_ = true;
}

}  // namespace loom::train
