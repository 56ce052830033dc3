// DeviceMesh: coordinates with the last dimension fastest, sub-groups along each dimension
// (checked by an all-reduce of the rank numbers inside each group), and invalid shapes as
// errors raised identically on every rank before any communication.
#include <gtest/gtest.h>

#include "comm/mpi_test_env.hpp"
#include "loom/comm/device_mesh.hpp"
#include "loom/comm/mesh_layout.hpp"
#include "loom/error.hpp"

namespace loom::comm {
namespace {

using loom::testing::world;

std::string error_of(const std::vector<MeshDim>& dims, int world_size) {
  try {
    MeshLayout(dims, world_size);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(DeviceMesh, InvalidShapesNameEveryDegree) {
  EXPECT_EQ(error_of({{"dp", 2}, {"pp", 2}, {"tp", 3}}, 8), "dp(2) x pp(2) x tp(3) = 12 != world size 8");
  EXPECT_EQ(error_of({{"dp", 0}, {"tp", 2}}, 8), "mesh degree dp(0) must be >= 1 in dp(0) x tp(2)");
  EXPECT_EQ(error_of({{"dp", -2}, {"tp", -4}}, 8), "mesh degree dp(-2) must be >= 1 in dp(-2) x tp(-4)");
  EXPECT_EQ(error_of({{"dp", 2}, {"dp", 4}}, 8), "mesh dimension 'dp' appears twice in dp(2) x dp(4)");
  EXPECT_EQ(error_of({{"dp", 8}}, 8), "(no error)");
  // The constructor validates before creating any group, so every rank throws and none hangs.
  EXPECT_THROW(DeviceMesh(world(), {{"dp", world().size() + 1}}), Error);
}

// Sum of world ranks inside this rank's group along dim, computed through the group.
int group_rank_sum(ProcessGroup& g) {
  float r = static_cast<float>(world().rank());
  g.all_reduce(&r, 1);
  return static_cast<int>(r);
}

TEST(DeviceMesh, GroupsAlongEachDimension) {
  const int p = world().size();
  // dp x tp when the world factors, else a 1-D mesh.
  const int tp = p % 2 == 0 ? 2 : 1;
  DeviceMesh mesh(world(), {{"dp", p / tp}, {"tp", tp}});
  const int r = world().rank();
  EXPECT_EQ(mesh.layout().coordinates(r), (std::vector<int>{r / tp, r % tp}));
  EXPECT_EQ(mesh.layout().rank_at(mesh.layout().coordinates(r)), r);
  ProcessGroup& tpg = mesh.group("tp");
  EXPECT_EQ(tpg.size(), tp);
  EXPECT_EQ(tpg.rank(), r % tp);  // neighbouring ranks share a tp group
  int want_tp = 0;
  for (int k = 0; k < tp; ++k) want_tp += r / tp * tp + k;
  EXPECT_EQ(group_rank_sum(tpg), want_tp);
  ProcessGroup& dpg = mesh.group("dp");
  EXPECT_EQ(dpg.size(), p / tp);
  int want_dp = 0;
  for (int k = 0; k < p / tp; ++k) want_dp += k * tp + r % tp;
  EXPECT_EQ(group_rank_sum(dpg), want_dp);
  EXPECT_THROW(mesh.group("pp"), Error);
}

TEST(DeviceMesh, ThreeDimensionalMeshOfEightRanks) {
  if (world().size() != 8) GTEST_SKIP() << "needs 8 ranks (runs in the 8-rank CTest case)";
  DeviceMesh mesh(world(), {{"dp", 2}, {"pp", 2}, {"tp", 2}});
  const int r = world().rank();
  EXPECT_EQ(mesh.coordinate("dp"), r / 4);
  EXPECT_EQ(mesh.coordinate("pp"), (r / 2) % 2);
  EXPECT_EQ(mesh.coordinate("tp"), r % 2);
  EXPECT_EQ(group_rank_sum(mesh.group("tp")), (r / 2 * 2) * 2 + 1);   // {2k, 2k+1}
  EXPECT_EQ(group_rank_sum(mesh.group("pp")), 2 * (r - ((r / 2) % 2) * 2) + 2);  // {x, x+2}
  EXPECT_EQ(group_rank_sum(mesh.group("dp")), 2 * (r % 4) + 4);       // {x, x+4}
  std::unique_ptr<ProcessGroup> dp_tp = mesh.make_group({"dp", "tp"});
  EXPECT_EQ(dp_tp->size(), 4);
  const int pp = (r / 2) % 2;
  EXPECT_EQ(group_rank_sum(*dp_tp), 0 + 1 + 4 + 5 + 4 * 2 * pp);  // ranks with this pp coordinate
}

TEST(MeshLayout, RankMapOfEightRanksNeedsNoCommunication) {
  const MeshLayout layout({{"dp", 2}, {"pp", 2}, {"tp", 2}}, 8);
  const std::string map = layout.rank_map();
  EXPECT_NE(map.find("mesh dp(2) x pp(2) x tp(2) over 8 ranks (tp varies fastest)"), std::string::npos) << map;
  EXPECT_NE(map.find("   5    1    0    1"), std::string::npos) << map;  // rank 5 = dp 1, pp 0, tp 1
  EXPECT_NE(map.find("tp groups: [0 1] [2 3] [4 5] [6 7]"), std::string::npos) << map;
  EXPECT_NE(map.find("pp groups: [0 2] [1 3] [4 6] [5 7]"), std::string::npos) << map;
  EXPECT_NE(map.find("dp groups: [0 4] [1 5] [2 6] [3 7]"), std::string::npos) << map;
  EXPECT_EQ(layout.groups_along({0, 2}), (std::vector<std::vector<int>>{{0, 1, 4, 5}, {2, 3, 6, 7}}));
}

}  // namespace
}  // namespace loom::comm
