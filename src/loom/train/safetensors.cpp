#include "loom/train/safetensors.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "loom/data/input_file.hpp"
#include "loom/error.hpp"

namespace loom::train {

namespace {

constexpr const char* kFormatVersion = "1";
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

const char* dtype_tag(DType t) { return t == DType::F32 ? "F32" : t == DType::I32 ? "I32" : "BF16"; }

DType dtype_from_tag(const std::string& tag, const std::string& path) {
  if (tag == "F32") return DType::F32;
  if (tag == "I32") return DType::I32;
  if (tag == "BF16") return DType::BF16;
  fail("'", path, "': unsupported dtype '", tag, "'");
}

}  // namespace

uint32_t crc32_of(uint32_t crc, const void* data, int64_t n) {
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {  // zlib takes 32-bit lengths
    const auto chunk = static_cast<uInt>(std::min<int64_t>(n, 1 << 30));
    crc = static_cast<uint32_t>(crc32(crc, p, chunk));
    p += chunk;
    n -= chunk;
  }
  return crc;
}


TensorFileParts lay_out_tensor_file(const TensorFile& file) {
  TensorFileParts parts;
  nlohmann::json header = nlohmann::json::object();
  int64_t offset = 0;
  uint32_t crc = crc32_of(0, nullptr, 0);
  for (const auto& [name, t] : file.tensors) {
    check(name != "__metadata__", "tensor name '__metadata__' is reserved");
    header[name] = {{"dtype", dtype_tag(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
    crc = crc32_of(crc, t.raw(), t.nbytes());
    parts.tensors.emplace_back(name, t);
  }
  nlohmann::json meta(file.metadata);
  meta["loom.format_version"] = kFormatVersion;
  meta["loom.crc32"] = std::to_string(crc);
  meta["loom.data_bytes"] = std::to_string(offset);
  header["__metadata__"] = meta;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) parts.head += static_cast<char>((n >> (8 * i)) & 0xFF);
  parts.head += text;
  return parts;
}

std::vector<std::string_view> TensorFileParts::views() const {
  std::vector<std::string_view> out{head};
  for (const auto& [name, t] : tensors) out.emplace_back(static_cast<const char*>(t.raw()), static_cast<size_t>(t.nbytes()));
  return out;
}

void TensorFileParts::copy_into(std::string& bytes) const {
  const std::vector<std::string_view> parts = views();
  size_t total = 0;
  for (const std::string_view v : parts) total += v.size();
  bytes.clear();  // the capacity stays: a buffer encoded into again is not allocated again
  bytes.reserve(total);
  for (const std::string_view v : parts) bytes.append(v);
}

void save_tensor_file(const std::string& path, const TensorFile& file) {
  write_file_atomically(path, lay_out_tensor_file(file).views());  // from the tensors, no copy
}

TensorFileReader::TensorFileReader(const std::string& path) : path_(path) {
  data::check_input_file(path, "tensor file");
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "cannot open '", path, "': ", std::strerror(errno));
  in.seekg(0, std::ios::end);
  const auto file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  check(file_size >= 8, "'", path, "' is truncated (", file_size, " bytes)");
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(len_bytes[i]) << (8 * i);
  check(header_len <= kMaxHeaderBytes && 8 + header_len <= file_size, "'", path,
        "' is truncated or not a tensor file (header length ", header_len, ", file ", file_size, " bytes)");
  std::string text(header_len, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_len));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("'", path, "' has a corrupted header: ", e.what());
  }
  check(header.is_object() && header.contains("__metadata__") && header["__metadata__"].is_object(), "'", path,
        "' is not a Loom tensor file (no __metadata__)");
  try {
    for (const auto& [k, v] : header["__metadata__"].items()) metadata_[k] = v.get<std::string>();
  } catch (const nlohmann::json::exception&) {
    fail("'", path, "': __metadata__ values must be strings");
  }
  const std::string version = metadata_.count("loom.format_version") ? metadata_["loom.format_version"] : "";
  check(version == kFormatVersion, "'", path, "' has format version '", version, "', this Loom reads version ",
        kFormatVersion);
  const uint64_t data_bytes = file_size - 8 - header_len;
  const std::string& recorded = metadata_["loom.data_bytes"];
  uint64_t want = 0;
  const auto [end, ec] = std::from_chars(recorded.data(), recorded.data() + recorded.size(), want);
  check(ec == std::errc() && end == recorded.data() + recorded.size(), "'", path, "' has an invalid data size '",
        recorded, "' in its header");
  // Which way the size is off says what happened: cut short, or bytes appended.
  check(data_bytes >= want, "'", path, "' is truncated: ", data_bytes, " data bytes, its header says ", want);
  check(data_bytes == want, "'", path, "' is longer than its header says: ", data_bytes, " data bytes, the header says ",
        want, " (", data_bytes - want, " extra)");
  check(metadata_.count("loom.crc32") != 0, "'", path, "' has no checksum");
  uint64_t expected_offset = 0;
  // Tensors are laid out in name order (std::map), contiguously; anything else is corruption.
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") continue;
    try {
      const Shape shape = v.at("shape").get<Shape>();
      const DType dtype = dtype_from_tag(v.at("dtype").get<std::string>(), path);
      const auto offsets = v.at("data_offsets").get<std::vector<uint64_t>>();
      check(offsets.size() == 2 && offsets[0] == expected_offset && offsets[1] >= offsets[0] &&
                offsets[1] <= data_bytes,
            "'", path, "': tensor '", name, "' has invalid data offsets");
      // Check the size before anything allocates, so a corrupted shape cannot ask for terabytes.
      uint64_t bytes = dtype_size(dtype);
      for (int64_t d : shape) {
        check(d >= 0 && static_cast<uint64_t>(d) <= data_bytes, "'", path, "': tensor '", name, "' has invalid shape");
        bytes *= static_cast<uint64_t>(d);
        check(bytes <= data_bytes || d == 0, "'", path, "': tensor '", name, "' is larger than the file");
      }
      check(bytes == offsets[1] - offsets[0], "'", path, "': tensor '", name, "' shape ", shape_str(shape),
            " does not match its ", offsets[1] - offsets[0], " bytes");
      entries_.emplace(name, Entry{shape, dtype, 8 + header_len + offsets[0]});
      expected_offset = offsets[1];
    } catch (const nlohmann::json::exception& e) {
      fail("'", path, "': malformed entry for tensor '", name, "': ", e.what());
    }
  }
  check(expected_offset == data_bytes, "'", path, "': tensors cover ", expected_offset, " of ", data_bytes, " data bytes");
  data_offset_ = 8 + header_len;
  data_bytes_ = data_bytes;
}

bool crc32_of_file(std::ifstream& in, uint64_t offset, uint64_t bytes, uint32_t& crc) {
  constexpr uint64_t kChunk = uint64_t{4} << 20;
  std::vector<char> buffer(static_cast<size_t>(std::min(kChunk, std::max<uint64_t>(bytes, 1))));
  in.seekg(static_cast<std::streamoff>(offset));
  uint32_t sum = crc32_of(0, nullptr, 0);
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min<uint64_t>(buffer.size(), bytes - done);
    in.read(buffer.data(), static_cast<std::streamsize>(n));
    if (!in.good()) return false;
    sum = crc32_of(sum, buffer.data(), static_cast<int64_t>(n));
    done += n;
  }
  crc = sum;
  return true;
}

void TensorFileReader::verify_checksum() const {
  std::ifstream in(path_, std::ios::binary);
  check(in.good(), "cannot open '", path_, "': ", std::strerror(errno));
  uint32_t crc = 0;
  check(crc32_of_file(in, data_offset_, data_bytes_, crc), "'", path_, "' is truncated: it ended while its ",
        data_bytes_, " data bytes were read");
  check_data_crc32(crc);
}

void TensorFileReader::check_data_crc32(uint32_t crc) const {
  const std::string& recorded = metadata_.at("loom.crc32");
  check(std::to_string(crc) == recorded, "'", path_, "' is corrupted: checksum ", crc, " does not match the recorded ",
        recorded);
}

std::vector<std::string> TensorFileReader::names() const {
  std::vector<std::string> out;
  for (const auto& [name, e] : entries_) out.push_back(name);
  return out;
}

const TensorFileReader::Entry& TensorFileReader::entry(const std::string& name) const {
  auto it = entries_.find(name);
  check(it != entries_.end(), "'", path_, "' has no tensor '", name, "'");
  return it->second;
}

const Shape& TensorFileReader::shape(const std::string& name) const { return entry(name).shape; }

Tensor TensorFileReader::read(const std::string& name, MemoryCategory category) const {
  const Entry& e = entry(name);
  std::ifstream in(path_, std::ios::binary);
  check(in.good(), "cannot open '", path_, "': ", std::strerror(errno));
  in.seekg(static_cast<std::streamoff>(e.offset));
  Tensor t = Tensor::empty(e.shape, e.dtype, category);
  in.read(static_cast<char*>(t.raw()), t.nbytes());
  check(in.good(), "'", path_, "' is truncated inside tensor '", name, "'");
  return t;
}

TensorFile load_tensor_file(const std::string& path, MemoryCategory category) {
  const TensorFileReader reader(path);
  TensorFile out;
  out.metadata = reader.metadata();
  uint32_t crc = crc32_of(0, nullptr, 0);
  for (const std::string& name : reader.names()) {  // name order = file order
    Tensor t = reader.read(name, category);
    crc = crc32_of(crc, t.raw(), t.nbytes());
    out.tensors.emplace(name, std::move(t));
  }
  reader.check_data_crc32(crc);
  return out;
}

}  // namespace loom::train
