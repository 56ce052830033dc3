#include "loom/parallel/group_sequence_parts.hpp"

#include <numeric>

#include "loom/comm/startup_watch.hpp"
#include "loom/error.hpp"

namespace loom::parallel {

void GroupSequenceParts::sum(std::vector<float>& v) const {
  inner_.sum(v);
  if (group_.size() > 1) group_.all_reduce(v.data(), static_cast<int64_t>(v.size()), comm::ReduceOp::Sum);
}

std::vector<int64_t> GroupSequenceParts::positions(int64_t rows) const {
  const std::vector<int64_t> in_group = inner_.positions(rows);  // within this rank's rows x inner parts
  const std::vector<int64_t> mine = rank_positions_(rows * parts());
  check(static_cast<int64_t>(mine.size()) == rows * inner_.parts(), "sequence parts: this rank holds ", mine.size(),
        " of a sequence's ", rows * parts(), " tokens, expected ", rows * inner_.parts());
  std::vector<int64_t> at(in_group.size());
  for (size_t i = 0; i < at.size(); ++i) at[i] = mine[static_cast<size_t>(in_group[i])];
  return at;
}

std::vector<float> GroupSequenceParts::gather(const std::vector<float>& v) const {
  const std::vector<float> inner = inner_.gather(v);
  std::vector<float> all(inner.size() * static_cast<size_t>(group_.size()));
  comm::stop_for_a_test("moe-capacity-gather");
  group_.all_gather_async(inner.data(), all.data(), static_cast<int64_t>(inner.size())).wait();
  return all;
}

GroupSequenceParts::RankPositions consecutive_chunk_of(const comm::ProcessGroup& group) {
  return [&group](int64_t length) {
    const int64_t rows = length / group.size();
    std::vector<int64_t> at(static_cast<size_t>(rows));
    std::iota(at.begin(), at.end(), group.rank() * rows);
    return at;
  };
}

}  // namespace loom::parallel
