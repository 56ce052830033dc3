// Files written whole or not at all: a temporary file beside the target, fsynced, renamed over
// it, the directory fsynced. A kill or a full disk leaves the previous file (or none), never a
// cut one; a checkpoint's rename survives a crash.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace loom::data {

// fsyncs a directory, so a rename inside it (a published checkpoint) survives a crash.
void sync_directory(const std::string& path);

// Writes bytes to path atomically (temp file in the same directory, fsync, rename, fsync dir).
// A path that exists and is no regular file (/dev/full, a FIFO) is written directly: there is
// nothing to replace.
void write_file_atomically(const std::string& path, const std::string& bytes);
// The same for a file whose bytes are parts laid end to end, written from where they lie (a
// checkpoint's tensors, without a copy of them in between).
void write_file_atomically(const std::string& path, const std::vector<std::string_view>& parts);

}  // namespace loom::data
