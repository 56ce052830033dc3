#include "loom/comm/byte_transport.hpp"

#include <algorithm>
#include <numeric>

namespace loom::comm {

namespace {

// packed: every rank's bytes back to back, lengths[q] of them from rank q.
std::vector<std::string> unpack(const std::string& packed, const std::vector<int64_t>& lengths) {
  std::vector<std::string> out;
  size_t offset = 0;
  for (int64_t length : lengths) {
    out.push_back(packed.substr(offset, static_cast<size_t>(length)));
    offset += static_cast<size_t>(length);
  }
  return out;
}

int64_t sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

}  // namespace

void broadcast_bytes(ProcessGroup& group, std::string& bytes, int root) {
  int64_t length = static_cast<int64_t>(bytes.size());
  group.broadcast_bytes_async(&length, sizeof length, root).wait();
  bytes.resize(static_cast<size_t>(length));
  group.broadcast_bytes_async(bytes.data(), length, root).wait();
}

std::vector<std::string> all_gather_bytes(ProcessGroup& group, const std::string& mine) {
  const std::vector<int64_t> lengths = all_gather_value(group, static_cast<int64_t>(mine.size()));
  std::string packed(static_cast<size_t>(sum(lengths)), '\0');
  group.gather_v_bytes_async(mine.data(), lengths, packed.data(), std::nullopt).wait();
  return unpack(packed, lengths);
}

std::vector<std::string> gather_bytes(ProcessGroup& group, const std::string& mine, int root) {
  const std::vector<int64_t> lengths = all_gather_value(group, static_cast<int64_t>(mine.size()));
  const bool at_root = group.rank() == root;
  std::string packed(at_root ? static_cast<size_t>(sum(lengths)) : 0, '\0');
  group.gather_v_bytes_async(mine.data(), lengths, packed.data(), root).wait();
  return at_root ? unpack(packed, lengths) : std::vector<std::string>{};
}

MinMax min_max(ProcessGroup& group, int64_t value) {
  const std::vector<int64_t> all = all_gather_value(group, value);
  const auto [lo, hi] = std::minmax_element(all.begin(), all.end());
  return {*lo, *hi};
}

}  // namespace loom::comm
