// Ranks pinned to cores when a node has more ranks than cores: each pipeline stage's ranks
// land on different cores, and every core gets its share. Pure, so it runs single-process.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "loom/comm/core_placement.hpp"
#include "loom/error.hpp"

namespace loom::comm {
namespace {

MeshLayout mesh(int dp, int pp, int tp) { return MeshLayout({{"dp", dp}, {"pp", pp}, {"tp", tp}}, dp * pp * tp); }

std::vector<int> all_ranks(int n) {
  std::vector<int> r(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) r[static_cast<size_t>(i)] = i;
  return r;
}

// Ranks of the same stage share a core only when the stage has more ranks than there are cores.
void expect_stages_spread(const MeshLayout& layout, int cores) {
  const std::vector<int> ranks = all_ranks(layout.world_size());
  const std::vector<int> core = spread_stages_over_cores(layout, ranks, cores);
  std::map<int, std::map<int, int>> per_stage;  // stage -> core -> ranks
  std::map<int, int> per_core;
  for (int r : ranks) {
    const int c = core[static_cast<size_t>(r)];
    ASSERT_GE(c, 0);
    ASSERT_LT(c, cores);
    per_stage[layout.coordinates(r)[1]][c]++;
    per_core[c]++;
  }
  const int stage_size = layout.size("dp") * layout.size("tp");
  for (const auto& [stage, cores_used] : per_stage)
    for (const auto& [c, n] : cores_used) EXPECT_LE(n, (stage_size + cores - 1) / cores) << "stage " << stage << " core " << c;
  for (const auto& [c, n] : per_core) EXPECT_LE(n, (layout.world_size() + cores - 1) / cores) << "core " << c;
}

TEST(CorePlacement, PipelineStagesSpreadOverCores) {
  // dp 2 x pp 2: ranks 0 and 2 are stage 0 (tp fastest, then pp): they must not share a core,
  // which is where the OS's round-robin start would put them.
  const std::vector<int> core = spread_stages_over_cores(mesh(2, 2, 1), all_ranks(4), 2);
  EXPECT_NE(core[0], core[2]);
  EXPECT_NE(core[1], core[3]);
  for (auto [dp, pp, tp, cores] : {std::tuple{2, 2, 1, 2}, {1, 2, 2, 2}, {4, 1, 1, 2}, {2, 2, 2, 2}, {1, 4, 1, 2},
                                   {2, 2, 2, 4}, {1, 8, 1, 3}, {2, 1, 2, 3}})
    expect_stages_spread(mesh(dp, pp, tp), cores);
}

TEST(CorePlacement, OnlyTheRanksOfThisNodeInAnyOrder) {
  // Node 2 of a job: world ranks 4-7 of dp 2 x pp 4, listed in another order.
  const MeshLayout layout = mesh(2, 4, 1);
  const std::vector<int> node = {6, 4, 7, 5};
  const std::vector<int> core = spread_stages_over_cores(layout, node, 2);
  // One rank per stage here: stages 0-3 (ranks 4-7) dealt round-robin over the 2 cores.
  EXPECT_EQ(core, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_THROW(spread_stages_over_cores(layout, node, 0), Error);
}

TEST(CorePlacement, WithoutPipelineRanksAreDealtInOrder) {
  EXPECT_EQ(spread_stages_over_cores(mesh(4, 1, 1), all_ranks(4), 2), (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(spread_stages_over_cores(MeshLayout({{"dp", 3}}, 3), all_ranks(3), 2), (std::vector<int>{0, 1, 0}));
}

}  // namespace
}  // namespace loom::comm
