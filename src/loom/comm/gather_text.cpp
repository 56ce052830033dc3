#include "loom/comm/gather_text.hpp"

#include <cstring>

namespace loom::comm {

namespace {
constexpr int kLengthTag = 32001, kTextTag = 32002;  // apart from the pipeline's tags
}

std::vector<std::string> gather_text(ProcessGroup& group, const std::string& text, int root) {
  if (group.rank() != root) {
    const int64_t length = static_cast<int64_t>(text.size());
    float header[2];  // the length's bits
    std::memcpy(header, &length, sizeof length);
    std::vector<float> data((text.size() + 3) / 4, 0.0f);
    std::memcpy(data.data(), text.data(), text.size());
    group.send_async(header, 2, root, kLengthTag).wait();
    group.send_async(data.data(), static_cast<int64_t>(data.size()), root, kTextTag).wait();
    return {};
  }
  std::vector<std::string> all(static_cast<size_t>(group.size()));
  all[static_cast<size_t>(root)] = text;
  for (int q = 0; q < group.size(); ++q) {
    if (q == root) continue;
    float header[2];
    group.recv_async(header, 2, q, kLengthTag).wait();
    int64_t length = 0;
    std::memcpy(&length, header, sizeof length);
    std::vector<float> data(static_cast<size_t>((length + 3) / 4));
    group.recv_async(data.data(), static_cast<int64_t>(data.size()), q, kTextTag).wait();
    all[static_cast<size_t>(q)].assign(reinterpret_cast<const char*>(data.data()), static_cast<size_t>(length));
  }
  return all;
}

}  // namespace loom::comm
