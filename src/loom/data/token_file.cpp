#include "loom/data/token_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string_view>

#include "loom/data/input_file.hpp"
#include "loom/error.hpp"

namespace loom::data {

namespace {

constexpr char kMagic[8] = {'L', 'O', 'O', 'M', 'T', 'O', 'K', 'S'};
constexpr uint32_t kVersion = 1;
// A spec is a vocabulary (GPT-2's: about 1 MiB); more is not a token file's header.
constexpr uint64_t kMaxSpecBytes = uint64_t{256} << 20;

uint64_t padded8(uint64_t n) { return (n + 7) / 8 * 8; }

void put_le(unsigned char* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint64_t get_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

bool is_token_file(const std::string& path) {
  if (file_kind(path) != "a regular file") return false;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  char head[8] = {};
  const size_t n = std::fread(head, 1, 8, f);
  std::fclose(f);
  // Seven bytes decide: a token file whose magic is damaged in its last byte is reported as a
  // damaged token file by TokenFile, never trained on as text (its ids read as characters).
  return n >= 7 && std::memcmp(head, kMagic, 7) == 0;
}

TokenFileWriter::TokenFileWriter(const std::string& path, const Tokenizer& tokenizer)
    : path_(path), tmp_(path + ".tmp"), vocab_size_(tokenizer.vocab_size()) {
  id_bytes_ = vocab_size_ <= 65536 ? 2 : 4;
  out_ = std::fopen(tmp_.c_str(), "wb");
  check(out_ != nullptr, "cannot write token file '", tmp_, "': ", std::strerror(errno));
  const std::string spec = tokenizer.spec();
  unsigned char header[kTokenFileHeaderBytes] = {};
  std::memcpy(header, kMagic, 8);
  put_le(header + 8, kVersion, 4);
  put_le(header + 12, static_cast<uint64_t>(id_bytes_), 4);
  put_le(header + 24, spec.size(), 8);  // the count (16-23) is written by finish()
  const std::string padding(padded8(spec.size()) - spec.size(), '\0');
  // Written before errno is read: check()'s arguments are evaluated in no fixed order.
  const bool written = std::fwrite(header, 1, sizeof header, out_) == sizeof header &&
                       std::fwrite(spec.data(), 1, spec.size(), out_) == spec.size() &&
                       std::fwrite(padding.data(), 1, padding.size(), out_) == padding.size();
  check(written, "cannot write token file '", tmp_, "': ", std::strerror(errno));
}

TokenFileWriter::~TokenFileWriter() {
  if (out_ != nullptr) {  // not finished: an error left it half written
    std::fclose(out_);
    std::remove(tmp_.c_str());
  }
}

void TokenFileWriter::append(const std::vector<int32_t>& ids) {
  std::vector<unsigned char> bytes(ids.size() * static_cast<size_t>(id_bytes_));
  for (size_t i = 0; i < ids.size(); ++i) {
    check(ids[i] >= 0 && ids[i] < vocab_size_, "token id ", ids[i], " outside the vocabulary of ", vocab_size_);
    put_le(bytes.data() + i * static_cast<size_t>(id_bytes_), static_cast<uint64_t>(ids[i]), id_bytes_);
  }
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), out_) == bytes.size();
  check(written, "cannot write token file '", tmp_, "': ", std::strerror(errno));
  count_ += static_cast<int64_t>(ids.size());
}

void TokenFileWriter::finish() {
  unsigned char count[8];
  put_le(count, static_cast<uint64_t>(count_), 8);
  const bool ok = std::fseek(out_, 16, SEEK_SET) == 0 && std::fwrite(count, 1, 8, out_) == 8 && std::fflush(out_) == 0 &&
                  ::fsync(::fileno(out_)) == 0;
  const int error = errno;
  std::fclose(out_);
  out_ = nullptr;
  if (!ok) std::remove(tmp_.c_str());
  check(ok, "cannot write token file '", tmp_, "': ", std::strerror(error));
  std::filesystem::rename(tmp_, path_);
}

namespace {

// Calls on_piece with consecutive pieces of the file (about 16 MiB each) that end at a
// boundary no tokenizer splits across, and the file offset each starts at.
void for_each_text_piece(const std::string& path, int64_t piece_bytes,
                         const std::function<void(std::string_view, int64_t)>& on_piece) {
  int64_t at = 0;
  check_input_file(path, "text file");
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "cannot open text file '", path, "': ", std::strerror(errno));
  std::string buffer;
  std::vector<char> chunk(static_cast<size_t>(std::max<int64_t>(piece_bytes, 1)));
  while (true) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    const auto got = static_cast<size_t>(in.gcount());
    check(!in.bad(), "error reading text file '", path, "'");
    buffer.append(chunk.data(), got);
    if (got == 0) break;
    size_t cut = buffer.size();
    while (cut > 1 && !(buffer[cut - 1] == '\n' && buffer[cut - 2] >= '!' && buffer[cut - 2] <= '~')) --cut;
    if (cut <= 1) continue;  // no safe boundary yet: read more
    on_piece(std::string_view(buffer).substr(0, cut - 1), at);
    at += static_cast<int64_t>(cut - 1);
    buffer.erase(0, cut - 1);
  }
  if (!buffer.empty()) on_piece(buffer, at);
}

// f() (a tokenizer's work on the piece of text file path at offset at); its loom::Error, which
// knows neither the file nor where the piece starts, rethrown naming both.
template <class F>
auto in_text_file(const std::string& path, int64_t at, const F& f) {
  try {
    return f();
  } catch (const Error& e) {
    if (at == 0) fail("text file '", path, "': ", e.what());
    fail("text file '", path, "', in the part from byte offset ", at, ": ", e.what());
  }
}

}  // namespace

int64_t tokenize_text_file(const std::string& text_path, const std::string& token_path, const std::string& kind,
                           const std::string& tokenizer_files, int64_t piece_bytes) {
  std::unique_ptr<Tokenizer> tokenizer;
  if (kind == "char") {
    std::set<char32_t> seen;  // the vocabulary of the whole text, read once before encoding
    for_each_text_piece(text_path, piece_bytes, [&](std::string_view piece, int64_t at) {
      for (char32_t c : in_text_file(text_path, at, [&] { return utf8_decode(piece); })) seen.insert(c);
    });
    check(!seen.empty(), "text file '", text_path, "' is empty");
    tokenizer = std::make_unique<CharTokenizer>(std::vector<char32_t>(seen.begin(), seen.end()));
  } else {
    tokenizer = Tokenizer::create(kind, "", tokenizer_files);
  }
  TokenFileWriter writer(token_path, *tokenizer);
  for_each_text_piece(text_path, piece_bytes, [&](std::string_view piece, int64_t at) {
    writer.append(in_text_file(text_path, at, [&] { return tokenizer->encode(piece); }));
  });
  check(writer.count() > 0, "text file '", text_path, "' is empty");
  writer.finish();
  return writer.count();
}

TokenFile::TokenFile(const std::string& path) : path_(path) {
  const auto file_bytes = static_cast<uint64_t>(check_input_file(path, "token file"));
  const int fd = ::open(path.c_str(), O_RDONLY);
  check(fd >= 0, "cannot open token file '", path, "': ", std::strerror(errno));
  if (file_bytes > 0) {
    map_ = ::mmap(nullptr, file_bytes, PROT_READ, MAP_SHARED, fd, 0);
    const int error = errno;
    ::close(fd);
    check(map_ != MAP_FAILED, "cannot map token file '", path, "': ", std::strerror(error));
    map_bytes_ = file_bytes;
  } else {
    ::close(fd);
  }
  const auto* p = static_cast<const unsigned char*>(map_);
  check(file_bytes >= 8 && std::memcmp(p, kMagic, 8) == 0, "'", path,
        "' is not a Loom token file (it does not start with LOOMTOKS); `loom tokenize` writes them");
  check(file_bytes >= static_cast<uint64_t>(kTokenFileHeaderBytes), "token file '", path, "' is truncated inside its header");
  const uint64_t version = get_le(p + 8, 4), id_bytes = get_le(p + 12, 4), count = get_le(p + 16, 8),
                 spec_bytes = get_le(p + 24, 8);
  check(version == kVersion, "token file '", path, "' has format version ", version, "; this Loom reads version ", kVersion);
  check(id_bytes == 2 || id_bytes == 4, "token file '", path, "' has ", id_bytes, " bytes per token id (2 or 4 expected)");
  check(spec_bytes >= 1 && spec_bytes <= kMaxSpecBytes && spec_bytes <= file_bytes, "token file '", path,
        "' has a tokenizer spec of ", spec_bytes, " bytes in a file of ", file_bytes);
  const uint64_t ids_at = kTokenFileHeaderBytes + padded8(spec_bytes);
  check(ids_at <= file_bytes, "token file '", path, "' is truncated inside its tokenizer spec");
  const uint64_t have = (file_bytes - ids_at) / id_bytes;
  check(count <= have, "token file '", path, "' is truncated: its header counts ", count, " tokens, the file holds ", have);
  check(file_bytes - ids_at == count * id_bytes, "token file '", path, "' has ", file_bytes - ids_at - count * id_bytes,
        " bytes after its ", count, " tokens (a damaged header or file)");
  spec_.assign(reinterpret_cast<const char*>(p + kTokenFileHeaderBytes), spec_bytes);
  int64_t vocab_size = 0;
  try {
    vocab_size = Tokenizer::from_spec(spec_)->vocab_size();
  } catch (const Error& e) {
    fail("token file '", path, "' records a tokenizer Loom cannot read: ", e.what());
  }
  id_bytes_ = static_cast<int>(id_bytes);
  count_ = static_cast<int64_t>(count);
  ids_ = p + ids_at;
  // Every id checked once, here: batches read windows at random, so a bad id found only when
  // one reads it could end a run hours in (or never be noticed by a short one).
  if (map_ != nullptr) ::madvise(map_, map_bytes_, MADV_SEQUENTIAL);
  uint64_t largest = 0;
  if (id_bytes == 2)
    for (int64_t i = 0; i < count_; ++i) largest = std::max<uint64_t>(largest, get_le(ids_ + 2 * i, 2));
  else
    for (int64_t i = 0; i < count_; ++i) largest = std::max<uint64_t>(largest, get_le(ids_ + 4 * i, 4));
  if (largest >= static_cast<uint64_t>(vocab_size)) {
    int64_t i = 0;
    while (get_le(ids_ + i * id_bytes_, id_bytes_) < static_cast<uint64_t>(vocab_size)) ++i;
    fail("token file '", path, "': token ", i, " (byte offset ", ids_at + static_cast<uint64_t>(i) * id_bytes, ") is id ",
         get_le(ids_ + i * id_bytes_, id_bytes_), ", outside its tokenizer's ", vocab_size,
         " ids (the first such; a damaged file, or ids written by another tokenizer)");
  }
  if (map_ != nullptr) ::madvise(map_, map_bytes_, MADV_RANDOM);  // batches read windows at random positions
}

TokenFile::~TokenFile() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

void TokenFile::copy(int64_t begin, int64_t n, int32_t* out, int64_t vocab_size) const {
  check(begin >= 0 && n >= 0 && begin + n <= count_, "token file '", path_, "': ids [", begin, ", ", begin + n,
        ") outside its ", count_);
  for (int64_t i = 0; i < n; ++i) {
    const auto id = static_cast<int64_t>(get_le(ids_ + (begin + i) * id_bytes_, id_bytes_));
    check(id < vocab_size, "token file '", path_, "': token ", begin + i, " is id ", id, ", outside its tokenizer's ",
          vocab_size, " ids");
    out[i] = static_cast<int32_t>(id);
  }
}

}  // namespace loom::data
