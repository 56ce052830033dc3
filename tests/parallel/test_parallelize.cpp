// The parallelize recipe's mesh: for every factorisation dp x pp x tp of the world (and
// every HSDP shard size), each named group holds exactly the ranks a hand-written rank
// formula says, in that order. The formula is the layout's definition, written here apart
// from the mesh code: rank = (d * pp + p) * tp + t, a shard group being hsdp neighbouring dp
// ranks; and for dp 2 x pp 2 x tp 2 with shards of 1 the whole table is spelled out. Every
// group waits with the configured comm_timeout, and ranks whose configurations differ stop,
// every one of them, naming the ranks and the keys before any other collective.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "comm/mpi_test_env.hpp"
#include "loom/error.hpp"
#include "loom/kernels/threads.hpp"
#include "loom/train/parallelize.hpp"
#include "loom/train/trainer.hpp"
#include "tiny_config.hpp"

namespace loom::train::parallelize_test {
namespace {

using loom::testing::world;

// The world ranks of this rank's group, in group order (gathered through the group).
std::vector<int> members(comm::ProcessGroup& g) {
  float mine = static_cast<float>(world().rank());
  Tensor in = Tensor::empty({1}), out = Tensor::empty({g.size()});
  in.f32()[0] = mine;
  g.all_gather(in, out);
  std::vector<int> ranks;
  for (int i = 0; i < g.size(); ++i) ranks.push_back(static_cast<int>(out.f32()[i]));
  return ranks;
}

struct Layout {
  int dp, pp, tp, shard;  // shard: ZeRO's shard group size (0: DDP, no sharding)
};

// Expected groups of rank r, from the formula.
std::vector<int> expected(const Layout& l, int r, const std::string& name) {
  const int t = r % l.tp, p = (r / l.tp) % l.pp, d = r / (l.tp * l.pp);
  auto at = [&](int dd, int pp, int tt) { return (dd * l.pp + pp) * l.tp + tt; };
  const int K = l.shard > 0 ? l.shard : 1;
  std::vector<int> out;
  if (name == "dp") for (int x = 0; x < l.dp; ++x) out.push_back(at(x, p, t));
  if (name == "pp") for (int x = 0; x < l.pp; ++x) out.push_back(at(d, x, t));
  if (name == "tp") for (int x = 0; x < l.tp; ++x) out.push_back(at(d, p, x));
  if (name == "shard") for (int x = 0; x < K; ++x) out.push_back(at(d / K * K + x, p, t));
  if (name == "replicate") for (int x = d % K; x < l.dp; x += K) out.push_back(at(x, p, t));
  if (name == "embedding") {
    if (p == 0 || p == l.pp - 1) {
      out.push_back(at(d, 0, t));
      if (l.pp > 1) out.push_back(at(d, l.pp - 1, t));
    } else {
      out.push_back(r);
    }
  }
  return out;
}

TrainConfig config_of(const Layout& l) {
  TrainConfig c;
  c.dp = l.dp;
  c.pp = l.pp;
  c.tp = l.tp;
  c.zero = l.shard > 0 ? 1 : 0;
  c.hsdp_shard = l.shard > 0 && l.shard < l.dp ? l.shard : 0;
  return c;
}

TEST(ParallelizeMesh, EveryFactorisationGivesTheRankTablesGroups) {
  const int n = world().size();
  int checked = 0;
  for (int tp = 1; tp <= n; ++tp)
    for (int pp = 1; pp * tp <= n; ++pp) {
      if (n % (tp * pp) != 0) continue;
      const int dp = n / (tp * pp);
      for (int shard = 0; shard <= dp; ++shard) {
        if (shard > 0 && dp % shard != 0) continue;
        const Layout l{dp, pp, tp, shard};
        auto mesh = parallel_mesh(config_of(l), world());
        for (const char* name : {"dp", "pp", "tp", "shard", "replicate", "embedding"})
          EXPECT_EQ(members(mesh->group(name)), expected(l, world().rank(), name))
              << name << " group of rank " << world().rank() << " in dp " << dp << " x pp " << pp << " x tp " << tp
              << ", shard " << shard;
        ++checked;
      }
    }
  EXPECT_GE(checked, 2);  // at least dp = world with and without sharding
}

TEST(ParallelizeMesh, HandWrittenTableForDp2Pp2Tp2) {
  if (world().size() != 8) GTEST_SKIP() << "the table is for 8 ranks";
  // Rank: dp, pp, tp coordinates  0:000 1:001 2:010 3:011 4:100 5:101 6:110 7:111.
  const std::vector<std::vector<int>> dp = {{0, 4}, {1, 5}, {2, 6}, {3, 7}, {0, 4}, {1, 5}, {2, 6}, {3, 7}};
  const std::vector<std::vector<int>> pp = {{0, 2}, {1, 3}, {0, 2}, {1, 3}, {4, 6}, {5, 7}, {4, 6}, {5, 7}};
  const std::vector<std::vector<int>> tp = {{0, 1}, {0, 1}, {2, 3}, {2, 3}, {4, 5}, {4, 5}, {6, 7}, {6, 7}};
  // ZeRO with shards of 1 (HSDP): each rank shards alone, and replicates across dp.
  auto mesh = parallel_mesh(config_of({2, 2, 2, 1}), world());
  const int r = world().rank();
  EXPECT_EQ(members(mesh->group("dp")), dp[r]);
  EXPECT_EQ(members(mesh->group("pp")), pp[r]);
  EXPECT_EQ(members(mesh->group("tp")), tp[r]);
  EXPECT_EQ(members(mesh->group("shard")), std::vector<int>{r});
  EXPECT_EQ(members(mesh->group("replicate")), dp[r]);
  EXPECT_EQ(members(mesh->group("embedding")), pp[r]);  // two stages: both ends hold the table
}

TEST(ParallelizeMesh, EveryGroupWaitsWithTheConfiguredTimeout) {
  const double before = world().timeout();
  TrainConfig c = config_of({world().size(), 1, 1, 1});
  c.comm_timeout = 17.0;
  auto mesh = parallel_mesh(c, world());
  EXPECT_EQ(world().timeout(), 17.0);
  for (const char* name : {"dp", "pp", "tp", "shard", "replicate", "embedding"})
    EXPECT_EQ(mesh->group(name).timeout(), 17.0) << name;
  world().set_timeout(before);
}

// threads 0 shares the node's cores among the job's ranks on it (each taking them all ran
// every core several times over: 3 ranks on 2 cores took 1.7 s a step instead of 10 ms); a
// count given is kept.
TEST(Parallelize, ThreadsZeroSharesTheNodesCoresAmongItsRanks) {
  TrainConfig c = testing::tiny_config();
  c.dp = world().size();
  c.threads = 0;
  kernels::set_num_threads(0);
  const int64_t usable = kernels::num_threads();  // the cores this rank may run on
  const int64_t share = std::max<int64_t>(1, std::min(usable, kernels::cpu_count() / world().ranks_on_node()));
  {
    Trainer t(c, true, &world());
    EXPECT_EQ(kernels::num_threads(), world().ranks_on_node() > 1 ? share : usable);
  }
  c.threads = 1;
  Trainer t(c, true, &world());
  EXPECT_EQ(kernels::num_threads(), 1);
}

TEST(Parallelize, RanksThatDisagreeStopOnEveryRank) {
  if (world().size() < 2) GTEST_SKIP() << "needs two ranks to disagree";
  TrainConfig c = loom::testing::tiny_config();
  c.dp = world().size();
  if (world().rank() == 1) c.model.n_layer = 4;
  try {
    const std::unique_ptr<ModelSpec> spec = make_model_spec(c);  // reads the data, sets the vocabulary
    parallelize(c, *spec, world());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    const int n = world().size();
    const std::string others = n == 2 ? "rank 0 has" : n == 3 ? "ranks 0 and 2 have" : "ranks 0 and 2-" + std::to_string(n - 1) + " have";
    const std::string want = "ranks disagree on the configuration: " + others +
                             " n_layer = 2, rank 1 has n_layer = 4; start every rank with the same configuration";
    EXPECT_NE(what.find(want), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace loom::train::parallelize_test
