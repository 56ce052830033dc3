// The byte transport against closed forms: rank r's bytes are a function of r (every byte
// value, '\0' included; some ranks empty; lengths uneven), so every rank knows what each
// collective must deliver. Runs at every rank count of the MPI suite.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "comm/mpi_test_env.hpp"
#include "loom/comm/byte_transport.hpp"
#include "loom/error.hpp"
#include "test_util.hpp"

namespace loom::comm {
namespace {

using loom::testing::error_of;
using loom::testing::world;

// Rank r's bytes in case `salt`: r * stride + salt bytes (0 for rank 0 with salt 0), cycling
// through all 256 values from a rank-dependent start.
std::string bytes_of(int rank, int64_t stride, int salt = 0) {
  std::string s(static_cast<size_t>(rank * stride + salt), '\0');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>((rank * 31 + salt + static_cast<int>(i)) % 256);
  return s;
}

const std::vector<int64_t> kStrides{0, 1, 7, 4099};

TEST(ByteTransport, BroadcastBytesDeliversTheRootsBytesFromEveryRoot) {
  ProcessGroup& g = world();
  for (int64_t stride : kStrides)
    for (int root = 0; root < g.size(); ++root) {
      std::string bytes = g.rank() == root ? bytes_of(root, stride) : std::string(5 + g.rank(), 'x');  // replaced
      broadcast_bytes(g, bytes, root);
      EXPECT_EQ(bytes, bytes_of(root, stride)) << "root " << root << " stride " << stride;
    }
}

TEST(ByteTransport, AllGatherBytesGivesEveryRankEveryRanksBytesInOrder) {
  ProcessGroup& g = world();
  for (int64_t stride : kStrides)
    for (int salt : {0, 3}) {
      const std::vector<std::string> all = all_gather_bytes(g, bytes_of(g.rank(), stride, salt));
      ASSERT_EQ(static_cast<int>(all.size()), g.size());
      for (int q = 0; q < g.size(); ++q) EXPECT_EQ(all[q], bytes_of(q, stride, salt)) << "rank " << q << " stride " << stride;
    }
}

TEST(ByteTransport, GatherBytesGivesOnlyTheRootEveryRanksBytes) {
  ProcessGroup& g = world();
  for (int64_t stride : kStrides)
    for (int root = 0; root < g.size(); ++root) {
      const std::vector<std::string> all = gather_bytes(g, bytes_of(g.rank(), stride, 1), root);
      if (g.rank() != root) {
        EXPECT_TRUE(all.empty());
        continue;
      }
      ASSERT_EQ(static_cast<int>(all.size()), g.size());
      for (int q = 0; q < g.size(); ++q) EXPECT_EQ(all[q], bytes_of(q, stride, 1)) << "root " << root;
    }
}

TEST(ByteTransport, EmptyPayloadsOnEveryRank) {
  ProcessGroup& g = world();
  std::string nothing;
  broadcast_bytes(g, nothing, g.size() - 1);
  EXPECT_TRUE(nothing.empty());
  EXPECT_EQ(all_gather_bytes(g, ""), std::vector<std::string>(static_cast<size_t>(g.size())));
  EXPECT_EQ(gather_bytes(g, "").size(), g.rank() == 0 ? static_cast<size_t>(g.size()) : 0u);
  g.all_gather_bytes_async(nullptr, nullptr, 0).wait();
  EXPECT_TRUE(all_gather_records(g, std::vector<double>{}) == std::vector<std::vector<double>>(static_cast<size_t>(g.size())));
}

struct Record {
  int kind;
  double start, end;
  bool operator==(const Record&) const = default;
};

TEST(ByteTransport, ValuesAndRecordsArriveBitForBit) {
  ProcessGroup& g = world();
  const int r = g.rank();
  const std::vector<Record> values = all_gather_value(g, Record{r, r / 3.0, -1e300 * r});
  std::vector<Record> mine;
  for (int i = 0; i < r; ++i) mine.push_back({i, r + i / 7.0, 1e-310 * i});  // rank 0: none; denormals too
  const std::vector<std::vector<Record>> records = all_gather_records(g, mine);
  ASSERT_EQ(static_cast<int>(records.size()), g.size());
  for (int q = 0; q < g.size(); ++q) {
    EXPECT_EQ(values[q], (Record{q, q / 3.0, -1e300 * q}));
    ASSERT_EQ(static_cast<int>(records[q].size()), q);
    for (int i = 0; i < q; ++i) EXPECT_EQ(records[q][i], (Record{i, q + i / 7.0, 1e-310 * i}));
  }
}

TEST(ByteTransport, MinMaxOfAnInteger) {
  ProcessGroup& g = world();
  const int p = g.size();
  // Beyond float's 24 bits of mantissa, where a float reduction would round them together.
  const int64_t base = (int64_t{1} << 40) + 1;
  const MinMax spread = min_max(g, base + 3 * g.rank() - 5);
  EXPECT_EQ(spread.min, base - 5);
  EXPECT_EQ(spread.max, base + 3 * (p - 1) - 5);
  const MinMax same = min_max(g, -1);
  EXPECT_EQ(same.min, -1);
  EXPECT_EQ(same.max, -1);
}

TEST(ByteTransport, CountsBytesInStatsAndDescriptions) {
  ProcessGroup& g = world();
  g.reset_stats();
  char c = static_cast<char>(g.rank());
  std::string all(static_cast<size_t>(g.size()), '\0');
  Work w = g.all_gather_bytes_async(&c, all.data(), 1);
  EXPECT_NE(w.description().find("all_gather_bytes(1 bytes)"), std::string::npos) << w.description();
  w.wait();
  for (int q = 0; q < g.size(); ++q) EXPECT_EQ(all[q], static_cast<char>(q));
  EXPECT_EQ(g.stats().calls, 1);
  EXPECT_EQ(g.stats().bytes, g.size());
}

TEST(ByteTransport, RejectsABadRootOrCounts) {
  ProcessGroup& g = world();
  std::string s;
  EXPECT_EQ(error_of([&] { broadcast_bytes(g, s, g.size()); }),
            "broadcast root " + std::to_string(g.size()) + " is not a rank of group 'world' (size " +
                std::to_string(g.size()) + ")");
  EXPECT_EQ(error_of([&] { g.gather_v_bytes_async(nullptr, {}, nullptr, 0); }),
            "gather_v_bytes: need " + std::to_string(g.size()) + " counts, got 0");
  EXPECT_EQ(error_of([&] { g.gather_v_bytes_async(nullptr, std::vector<int64_t>(g.size()), nullptr, -1); }),
            "gather root -1 is not a rank of group 'world' (size " + std::to_string(g.size()) + ")");
}

}  // namespace
}  // namespace loom::comm
