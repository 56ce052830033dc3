// Named tensors in the safetensors layout (8-byte little-endian header length, a JSON
// header of names, dtypes, shapes and byte ranges, then the raw data), which PyTorch users
// can read with a few lines of Python. Loom adds a CRC-32 of the data and a format version
// in the header's __metadata__, and writes atomically: temp file, fsync, rename.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <vector>
#include <string>
#include <string_view>
#include <utility>

#include "loom/data/output_file.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom::train {

struct TensorFile {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Atomic: a reader sees either the previous file or the complete new one.
void save_tensor_file(const std::string& path, const TensorFile& file);
// A tensor file laid out without copying its data: the head (the 8-byte header length and
// the header, whose metadata holds the data's CRC-32) and each tensor's bytes in file order,
// viewed where they lie (the tensors held here keep them alive).
struct TensorFileParts {
  std::string head;
  std::vector<std::pair<std::string, Tensor>> tensors;  // name order
  // The file's bytes as parts end to end: head, then each tensor's.
  std::vector<std::string_view> views() const;
  // Those bytes copied into bytes, replacing what it held and keeping its allocation when large enough.
  void copy_into(std::string& bytes) const;
};
TensorFileParts lay_out_tensor_file(const TensorFile& file);
// Throws loom::Error naming the path and the problem for a missing, truncated, corrupted
// (checksum) or malformed file. Tensors are allocated in `category`.
TensorFile load_tensor_file(const std::string& path, MemoryCategory category = MemoryCategory::Other);

// Reads single tensors of a file without reading the rest (a sharded checkpoint's rank
// reads only the pieces it needs). The header is validated on opening; the data's checksum
// covers the whole file, so a caller reading single tensors checks its own checksums.
class TensorFileReader {
 public:
  explicit TensorFileReader(const std::string& path);
  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  const Shape& shape(const std::string& name) const;
  Tensor read(const std::string& name, MemoryCategory category = MemoryCategory::Other) const;
  // loom::Error naming the file unless crc is the CRC-32 of the whole data section recorded
  // in the header.
  void check_data_crc32(uint32_t crc) const;
  // Reads the data section through a small buffer and checks its CRC-32 (check_data_crc32).
  // Nothing is kept (a model loaded for inference reads its weights, not the optimizer's
  // moments beside them).
  void verify_checksum() const;

 private:
  struct Entry {
    Shape shape;
    DType dtype;
    uint64_t offset;  // of the first byte, from the start of the file
  };
  const Entry& entry(const std::string& name) const;
  std::string path_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, Entry> entries_;
  uint64_t data_offset_ = 0, data_bytes_ = 0;  // the data section, from the start of the file
};

// CRC-32 (zlib) of n bytes, continuing crc (start from 0).
uint32_t crc32_of(uint32_t crc, const void* data, int64_t n);
// CRC-32 of `bytes` bytes of an open file from `offset`, read through a small buffer; false
// (crc unset) when the file ends first.
bool crc32_of_file(std::ifstream& in, uint64_t offset, uint64_t bytes, uint32_t& crc);

// The atomic writers, for the checkpoint writers that use them with this header.
using data::sync_directory;
using data::write_file_atomically;

}  // namespace loom::train
