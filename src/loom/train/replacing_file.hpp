// A run file (memory.json, trace.json) written whole or not at all: the text goes to a
// temporary file beside it, renamed over the file once complete. A run killed mid-write, or a
// disk that fills, leaves the previous file (or none), never a cut one that readers such as
// `loom report` refuse. A path that is not a regular file (/dev/null, /dev/full) is written
// directly.
#pragma once

#include <fstream>
#include <string>

namespace loom::train {

class ReplacingFile {
 public:
  // what: the file's name in messages ("trace", "per-rank memory file").
  ReplacingFile(std::string path, std::string what);
  ~ReplacingFile();  // removes the temporary file when commit() was not reached
  ReplacingFile(const ReplacingFile&) = delete;
  ReplacingFile& operator=(const ReplacingFile&) = delete;

  std::ofstream& out() { return out_; }
  // Flushes, checks every write, and puts the file in place; loom::Error naming the file and
  // the reason otherwise.
  void commit();

 private:
  std::string path_, what_, writing_;  // writing_: the temporary file, or path_ itself
  std::ofstream out_;
  bool committed_ = false;
};

}  // namespace loom::train
