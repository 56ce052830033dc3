// Named tensors in the safetensors layout (8-byte little-endian header length, a JSON
// header of names, dtypes, shapes and byte ranges, then the raw data), which PyTorch users
// can read with a few lines of Python. Loom adds a CRC-32 of the data and a format version
// in the header's __metadata__, and writes atomically: temp file, fsync, rename.
#pragma once

#include <map>
#include <string>

#include "loom/tensor/tensor.hpp"

namespace loom::train {

struct TensorFile {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Atomic: a reader sees either the previous file or the complete new one.
void save_tensor_file(const std::string& path, const TensorFile& file);
// Throws loom::Error naming the path and the problem for a missing, truncated, corrupted
// (checksum) or malformed file. Tensors are allocated in `category`.
TensorFile load_tensor_file(const std::string& path, MemoryCategory category = MemoryCategory::Other);

// Writes bytes to path atomically (temp file in the same directory, fsync, rename, fsync dir).
void write_file_atomically(const std::string& path, const std::string& bytes);

}  // namespace loom::train
