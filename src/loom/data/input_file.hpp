// Input files are checked before they are opened: only a regular file of a bounded size is
// read. A FIFO would block the reader forever, a directory reads as nothing, and a device
// such as /dev/zero never ends; each is refused with a message naming the path and what it is.
#pragma once

#include <cstdint>
#include <string>

namespace loom::data {

// The largest text file `data` may name: Loom holds the corpus in memory as 32-bit tokens,
// so 1 GiB of text becomes up to 8 GiB of tokens.
constexpr int64_t kMaxDataBytes = int64_t{1} << 30;
// The largest TOML configuration file.
constexpr int64_t kMaxConfigBytes = int64_t{16} << 20;

// "a directory", "a FIFO (named pipe)", "a character device", ..., "a regular file",
// "missing" (following symbolic links; "a symbolic link loop" when they never end).
std::string file_kind(const std::string& path);

// Returns the size of the regular file at path, or throws loom::Error: "cannot open <what>
// '<path>': <reason>" when it cannot be read, "<what> '<path>' is a directory, not a regular
// file", or that it is larger than max_bytes (< 0: no limit).
int64_t check_input_file(const std::string& path, const std::string& what, int64_t max_bytes = -1);

}  // namespace loom::data
