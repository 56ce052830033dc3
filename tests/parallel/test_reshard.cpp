// Re-sharding on load: a checkpoint saved under layout A (sharded directory or single file)
// and resumed under layout B must continue exactly like the uninterrupted serial run
// (losses relative 1e-5, parameters relative 1e-4). Layouts cover dp, tp, pp, ZeRO 0-3,
// interleaving, sequence parallelism, expert parallelism (a mixture of experts' experts
// gathered from and split over any ep), 3D tensor-parallel grids (a weight split twice and
// sharded over depth; with dp: 4D; saved as one file or as each grid rank's own pieces) and
// the serial process, at 1..8 ranks; a pair runs at the rank counts its layouts fit (serial
// fits every count: each rank alone, rank 0 saves). bf16 pairs (the parameters and moments
// checkpoints hold stay fp32) follow the serial bf16 run within kBf16Tolerances. Every pair's
// resumed state, before it trains, is the saved state bit for bit: loading copies fp32
// values, and the bf16 bounds alone would pass a tensor left at its initial values.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <map>
#include <numeric>
#include <sstream>
#include <ostream>
#include <string>
#include <vector>

#include "comm/mpi_test_env.hpp"
#include "loom/train/checkpoint.hpp"
#include "loom/train/checkpoint_manifest.hpp"
#include "loom/train/trainer.hpp"
#include "parallel/equivalence.hpp"

namespace loom::train {
namespace {

using loom::testing::world;
using namespace loom::testing::equivalence;

struct Layout {
  int64_t dp = 1, pp = 1, tp = 1, zero = 0, chunks = 1;
  bool sequence_parallel = false;
  std::string format = "sharded";
  int64_t hsdp_shard = 0;
  int64_t ep = 1, experts = 0;  // a mixture of experts in every block when experts > 0
  std::string tp_3d{};          // a 3D tensor-parallel grid "R,C,D"
  std::string precision = "fp32";
  std::array<int64_t, 3> grid() const {
    TrainConfig c;
    c.tp_3d = tp_3d;
    return c.tp_3d_grid();
  }
  int64_t batch_shards() const { return dp * grid()[2]; }
  int64_t ranks() const { return dp * pp * tp * grid()[0] * grid()[1] * grid()[2]; }
};

std::ostream& operator<<(std::ostream& os, const Layout& l) {
  os << "dp" << l.dp << " pp" << l.pp << " tp" << l.tp << " zero" << l.zero;
  if (l.chunks > 1) os << " interleaved" << l.chunks;
  if (l.sequence_parallel) os << " sp";
  if (l.hsdp_shard > 0) os << " hsdp" << l.hsdp_shard;
  if (l.experts > 0) os << " moe" << l.experts << " ep" << l.ep;
  if (!l.tp_3d.empty()) os << " tp_3d " << l.tp_3d;
  if (l.precision != "fp32") os << " " << l.precision;
  return os << " (" << l.format << ")";
}

struct Pair {
  Layout from, to;
};

void PrintTo(const Pair& p, std::ostream* os) { *os << p.from << " -> " << p.to; }

// rows: global rows per micro-batch, divisible by both pairs' batch shards (dp, x depth under
// 3D); micro: micro-batches.
TrainConfig config_of(const Layout& l, int64_t rows, int64_t micro) {
  TrainConfig c = tiny(l.dp, rows / l.batch_shards(), micro);
  c.model.n_layer = 4;  // room for pp 2 x 2 chunks
  c.model.padded_vocab_size = 128;  // the same token table under tp 1 and 2
  c.pp = l.pp;
  c.tp = l.tp;
  c.zero = l.zero;
  c.chunks = l.chunks;
  if (l.chunks > 1) c.schedule = "interleaved";
  c.sequence_parallel = l.sequence_parallel;
  c.hsdp_shard = l.hsdp_shard;
  c.ep = l.ep;
  c.model.moe.experts = l.experts;
  c.tp_3d = l.tp_3d;
  c.precision = l.precision;
  c.checkpoint_format = l.format;
  c.steps = 10;
  c.decay_steps = 10;  // the same schedule for the 5-step first half
  c.warmup_steps = 2;  // before decay_steps, as the config requires
  return c;
}

// Runs body under layout l: on the whole world, or each rank alone for the serial layout.
template <class F>
void under(const Layout& l, F&& body) {
  if (l.ranks() == 1) {
    body(static_cast<comm::ProcessGroup*>(nullptr));
  } else {
    body(&world());
  }
}

// Every tensor of the serial state (parameters and optimizer state), as state_dict() gathers it.
using State = std::map<std::string, std::vector<float>>;

State state_of(Trainer& t) {
  State out;
  for (auto& [name, value] : t.state_dict()) out[name].assign(value.f32(), value.f32() + value.numel());
  return out;
}

// Collective: the first half, 5 steps of c under l ending in a checkpoint in dir; the state saved.
State train_and_save(const Layout& l, TrainConfig c, const std::string& dir) {
  State saved;
  under(l, [&](comm::ProcessGroup* g) {
    c.steps = 5;
    // A serial layout runs on every rank alone; only the one that saves owns the directory.
    c.out_dir = g != nullptr || world().rank() == 0 ? dir : "";
    Trainer saver(c, true, g);
    run(saver);
    if (g != nullptr || world().rank() == 0) saver.save_checkpoint_now();
    saved = state_of(saver);
  });
  world().barrier();
  return saved;
}

class Reshard : public ::testing::TestWithParam<Pair> {};

TEST_P(Reshard, ResumesUnderAnotherLayoutLikeTheUninterruptedSerialRun) {
  const Pair pair = GetParam();
  const int p = world().size();
  for (const Layout& l : {pair.from, pair.to})
    if (l.ranks() != 1 && l.ranks() != p) GTEST_SKIP() << "needs " << l.ranks() << " ranks";
  if (pair.from.ranks() == 1 && pair.to.ranks() == 1 && p > 1) GTEST_SKIP() << "serial to serial runs at 1 rank";
  const int64_t rows = std::lcm(pair.from.batch_shards(), pair.to.batch_shards()) * 2;
  const int64_t micro = std::max<int64_t>(2, std::max(pair.from.pp, pair.to.pp));
  ASSERT_EQ(pair.from.precision, pair.to.precision) << "a pair trains in one precision";

  Layout serial;
  serial.experts = pair.from.experts;
  serial.precision = pair.from.precision;
  TrainConfig reference = config_of(serial, rows, micro);
  const TrainingRun& want = serial_run(reference, (pair.from.precision == "bf16" ? kBf16Tolerances : Tolerances{}).grad);
  const std::vector<float> last_five(want.losses.end() - 5, want.losses.end());

  const std::string dir = fresh_shared_dir("loom_reshard", world());
  const State saved_state = train_and_save(pair.from, config_of(pair.from, rows, micro), dir);
  // The format on disk is the one asked for.
  const std::string saved = resolve_checkpoint_path(dir);
  EXPECT_EQ(std::filesystem::is_directory(saved), pair.from.format == "sharded") << saved;

  under(pair.to, [&](comm::ProcessGroup* g) {
    TrainConfig c = config_of(pair.to, rows, micro);
    c.resume = dir;
    Trainer resumed(c, true, g);
    EXPECT_EQ(resumed.step(), 5);
    std::ostringstream what;
    what << pair.from << " -> " << pair.to;
    const State loaded = state_of(resumed);
    EXPECT_EQ(loaded.size(), saved_state.size()) << what.str();
    for (const auto& [name, values] : saved_state) {
      const auto it = loaded.find(name);
      if (it == loaded.end()) {
        ADD_FAILURE() << what.str() << ": the resumed state has no " << name;
        continue;
      }
      EXPECT_TRUE(loom::testing::all_close(it->second, values, 0, 0, what.str() + " resumed " + name));
    }
    // A mixture of experts' expert gradients are sums over the tokens routed to each expert,
    // reduced over another set of ranks under each ep (expert_dp = dp / ep), so they differ
    // from the serial run's in the last bits; AdamW divides each element's step by its own
    // gradient's magnitude, so an element whose gradient is near zero carries that rounding
    // into its value at up to ~1e-4 of its tensor's scale after 10 steps (measured 1.6e-4 on
    // an AVX-512 host, ep 2 -> ep 4). A resharding mistake (an expert's rows loaded into
    // another's place) moves values by their own size, far above 1e-3 of the scale.
    Tolerances tol = pair.from.precision == "bf16" ? kBf16Tolerances : Tolerances{};
    if (pair.from.experts > 0 && pair.from.precision != "bf16") tol.param = 1e-3;
    expect_equivalent(run(resumed), {last_five, want.names, want.params, want.adamw_bound}, c, what.str(), tol);
  });
  remove_shared_dir(dir, world());
}

Layout L(int64_t dp, int64_t pp, int64_t tp, int64_t zero, int64_t chunks = 1, bool sp = false,
         const std::string& format = "sharded") {
  return {dp, pp, tp, zero, chunks, sp, format};
}

Layout hsdp(Layout l, int64_t shard) {
  l.hsdp_shard = shard;
  return l;
}

Layout moe(Layout l, int64_t ep, int64_t experts = 4) {
  l.ep = ep;
  l.experts = experts;
  return l;
}

// A 3D grid (4D with dp > 1) that saves single files; sharded(grid3d(...)) saves its pieces.
Layout grid3d(const std::string& grid, int64_t dp = 1) {
  Layout l = L(dp, 1, 1, 0, 1, false, "single");
  l.tp_3d = grid;
  return l;
}

Layout sharded(Layout l) {
  l.format = "sharded";
  return l;
}

Layout bf16(Layout l) {
  l.precision = "bf16";
  return l;
}

const Layout kSerial = L(1, 1, 1, 0);
const Layout kSerialFile = L(1, 1, 1, 0, 1, false, "single");

INSTANTIATE_TEST_SUITE_P(
    Layouts, Reshard,
    ::testing::Values(
        // 1 rank: the sharded format in one process.
        Pair{kSerial, kSerial},
        // 2 ranks
        Pair{L(2, 1, 1, 3), kSerial}, Pair{L(1, 1, 2, 0), L(1, 2, 1, 0)}, Pair{L(1, 2, 1, 0), L(2, 1, 1, 1)},
        Pair{kSerialFile, L(2, 1, 1, 2)}, Pair{L(2, 1, 1, 1), L(1, 1, 2, 0, 1, true)}, Pair{L(2, 1, 1, 0), L(2, 1, 1, 3)},
        // 3 and 5 ranks: ZeRO shards with padding
        Pair{L(3, 1, 1, 3), kSerial}, Pair{L(3, 1, 1, 2), L(3, 1, 1, 0)}, Pair{kSerialFile, L(5, 1, 1, 3)},
        Pair{L(5, 1, 1, 1), kSerialFile},
        // 4 ranks
        Pair{L(1, 2, 1, 0, 2), L(2, 1, 1, 1)} /* needs 2 */, Pair{L(2, 2, 1, 0, 2), L(4, 1, 1, 1)},
        Pair{kSerialFile, L(2, 1, 2, 0)}, Pair{L(2, 1, 2, 3), L(1, 2, 2, 0)}, Pair{L(1, 2, 2, 1, 2), L(4, 1, 1, 3)},
        Pair{L(4, 1, 1, 3), L(2, 2, 1, 1)}, Pair{hsdp(L(4, 1, 1, 2), 2), L(2, 1, 2, 3)},
        // 8 ranks
        Pair{L(2, 2, 2, 1), L(4, 1, 2, 3, 1, true)}, Pair{L(8, 1, 1, 3), kSerial}, Pair{L(2, 2, 2, 0, 2), kSerialFile},
        // expert parallelism: experts split over ep 2, 3, 4 and gathered back
        Pair{moe(L(2, 1, 1, 0), 2), moe(kSerial, 1)}, Pair{moe(kSerialFile, 1), moe(L(2, 1, 1, 0), 2)},
        Pair{moe(L(3, 1, 1, 0), 3, 6), moe(kSerialFile, 1, 6)}, Pair{moe(L(4, 1, 1, 0), 2), moe(L(4, 1, 1, 0), 4)},
        // 3D tensor parallelism: gathered to the serial layout on saving, split again on loading
        // (grid to grid: here at 2 ranks, and mpi.train_tp3d_resume_other_grid)
        Pair{grid3d("2,2,2"), kSerial}, Pair{kSerialFile, grid3d("2,2,2")},
        Pair{grid3d("2,1,2", 2), L(2, 2, 2, 1)}, Pair{L(2, 1, 2, 3), grid3d("1,2,1", 2)}, Pair{grid3d("2,1,1"), grid3d("1,1,2")},
        // ... sharded: every grid rank writes the pieces it alone holds (a weight's second split
        // in the manifest, a bias by its replica 0), loaded into any layout and back
        Pair{sharded(grid3d("2,1,2")), kSerial}, Pair{kSerial, sharded(grid3d("2,2,1"))},
        Pair{sharded(grid3d("1,2,2")), sharded(grid3d("2,1,2"))}, Pair{sharded(grid3d("1,1,2", 2)), L(2, 1, 2, 0)},
        Pair{sharded(grid3d("1,1,2")), sharded(grid3d("2,1,1"))}, Pair{sharded(grid3d("2,2,2")), L(2, 2, 2, 1)},
        // ... composed: ZeRO (the experts whole beside the dense shards), pp and tp
        Pair{moe(L(2, 1, 1, 3), 2), moe(kSerial, 1)}, Pair{moe(L(3, 1, 1, 1), 3, 6), moe(L(3, 1, 1, 3), 3, 6)},
        Pair{moe(L(2, 2, 1, 0), 2), moe(L(2, 1, 2, 2), 2)},
        // ZeRO-2/3 under a pipeline: each chunk's root unit, the end stages' tables in units of their own
        Pair{L(2, 2, 1, 3), L(4, 1, 1, 2)}, Pair{L(4, 1, 1, 3), L(2, 2, 1, 2, 2)}, Pair{L(2, 2, 2, 3, 1, true), kSerialFile},
        // bf16: the fp32 parameters (under ZeRO the shards its gathers read) and moments, with
        // the experts ZeRO leaves whole beside the dense shards
        Pair{bf16(moe(L(2, 1, 1, 1), 2)), bf16(moe(kSerial, 1))}, Pair{bf16(L(2, 1, 1, 2)), bf16(L(1, 1, 2, 0))},
        Pair{bf16(L(2, 1, 1, 3)), bf16(L(1, 2, 1, 0))}, Pair{bf16(sharded(grid3d("2,1,1"))), bf16(L(2, 1, 1, 0))},
        Pair{bf16(moe(L(2, 1, 1, 2, 1, false, "single"), 2)), bf16(moe(L(2, 1, 1, 1), 2))}),
    [](const auto& info) { return "pair" + std::to_string(info.index); });

// Under the same 3D grid a resume continues bit for bit from either format: a single file
// holds the serial layout, which splitting again gives every rank the very values it had; a
// sharded checkpoint holds every grid rank's own pieces (each written once: the manifest's
// tiling check passed on saving), weights and AdamW moments alike.
TEST(Reshard3D, ResumingUnderTheSameGridContinuesBitForBit) {
  if (world().size() != 4) GTEST_SKIP() << "runs on 4 ranks";
  TrainConfig straight_config = config_of(grid3d("2,1,2"), 4, 2);
  Trainer straight(straight_config, true, &world());
  const TrainingRun want = run(straight);

  for (const Layout& grid : {grid3d("2,1,2"), sharded(grid3d("2,1,2"))}) {
    SCOPED_TRACE(grid.format);
    TrainConfig c = config_of(grid, 4, 2);
    const std::string dir = fresh_shared_dir("loom_reshard_3d_exact", world());
    train_and_checkpoint(c, 5, dir, world());
    if (grid.format == "sharded") {
      const Manifest m = read_manifest(resolve_checkpoint_path(dir));
      EXPECT_EQ(m.layout.tp_3d, "2,1,2");
      EXPECT_EQ(m.files.size(), 4u) << "every grid rank holds weight pieces of its own";
      int64_t model = 0, moments = 0, second_splits = 0;
      for (const auto& [name, t] : m.tensors) {
        model += name.rfind("model.", 0) == 0;
        moments += name.rfind("optim.exp_avg", 0) == 0;
        for (const ManifestPiece& p : t.pieces) second_splits += p.layout.spec.dim2 == 1 && p.layout.spec.parts2 == 2;
      }
      EXPECT_EQ(moments, 2 * model);
      EXPECT_GT(second_splits, 0) << "the layers whose input features are split over row (2) record it";
    }
    c.resume = dir;
    Trainer resumed(c, true, &world());
    ASSERT_EQ(resumed.step(), 5);
    const TrainingRun got = run(resumed);
    EXPECT_EQ(got.losses, std::vector<float>(want.losses.end() - 5, want.losses.end()));
    EXPECT_EQ(got.names, want.names);
    EXPECT_EQ(got.params, want.params);
    remove_shared_dir(dir, world());
  }
}

// The token table's padding rows are read by nothing that reaches the loss, so a checkpoint
// whose table has other padding (saved under another tp, where padded_vocab_size 0 resolves to
// another multiple of 64 x tp) loads with the table re-padded: the vocabulary rows and their
// moments bit for bit, stored padding rows kept as far as the new table reaches, rows past the
// stored ones zero. Resumed, training continues like the uninterrupted serial run (with the
// saving run's table) in every row that counts. Shrinking (tp 2, 192 rows -> serial, 128), growing (serial file -> tp 2,
// 256 rows) and growing into ZeRO-3's flat shards (-> dp 2, 320 rows), at 2 ranks; and shrinking
// into ZeRO-1 and (through --resume auto) ZeRO-3 where rank 1's shard holds none of the table:
// with a context of 256 the root unit (table, wpe, ln_f) splits after the table, so that rank
// loads nothing of it yet must accept the checkpoint's other padding (it refused, and auto
// skipped the checkpoint and started fresh).
TEST(ReshardRepadding, AnotherTokenTablePaddingResumesLikeTheSerialRun) {
  if (world().size() != 2) GTEST_SKIP() << "runs on 2 ranks";
  struct Case {
    Layout from;
    int64_t from_rows;
    Layout to;
    int64_t to_rows;
    int64_t block_size = 16;
    bool resume_auto = false;  // else from the run directory
  };
  const Case cases[] = {{L(1, 1, 2, 0), 192, kSerial, 0},
                        {kSerialFile, 0, L(1, 1, 2, 0), 256},
                        {kSerial, 0, L(2, 1, 1, 3), 320},
                        {L(1, 1, 2, 0), 192, L(2, 1, 1, 1), 0, 256},
                        {L(1, 1, 2, 0), 192, L(2, 1, 1, 3), 0, 256, true}};
  const int64_t rows = 4, micro = 2;
  auto with_rows = [&](const Layout& l, int64_t padded, int64_t block_size) {
    TrainConfig c = config_of(l, rows, micro);
    c.model.padded_vocab_size = padded;  // 0: resolved for the layout's tp
    c.model.block_size = block_size;
    return c;
  };
  const int64_t C = with_rows(kSerial, 0, 16).model.n_embd;
  // The vocabulary's rows of every token table (the head's copy too), as the serial run's are.
  auto vocabulary_rows = [&](TrainingRun r, int64_t V) {
    for (size_t i = 0; i < r.names.size(); ++i)
      if (r.names[i].ends_with("embedding.wte")) r.params[i].resize(static_cast<size_t>(V * C));
    return r;
  };
  // Parameters within 1e-3 of their tensor's scale plus the serial run's AdamW bound: tp 2's
  // first half moves a near-zero gradient's sign, which AdamW turns into a step of up to lr
  // either way (a fc bias of 3e-4 ended 4.8e-4 of its tensor's scale off, the same with the
  // table left at 192 rows: tp 2's own rounding). A row loaded into another's place is off by
  // its own size, and the loaded state is compared bit for bit above.
  for (const Case& k : cases) {
    std::ostringstream what;
    what << k.from << " (" << k.from_rows << " rows) -> " << k.to << " (" << k.to_rows << " rows), context "
         << k.block_size << (k.resume_auto ? ", resume auto" : "");
    SCOPED_TRACE(what.str());
    // Initialisation draws the whole table first, so the reference has the saving run's rows.
    const TrainingRun& want = serial_run(with_rows(kSerial, k.from_rows, k.block_size), Tolerances{}.grad);
    const std::string dir = fresh_shared_dir("loom_reshard_repad", world());
    const State saved = train_and_save(k.from, with_rows(k.from, k.from_rows, k.block_size), dir);
    under(k.to, [&](comm::ProcessGroup* g) {
      TrainConfig c = with_rows(k.to, k.to_rows, k.block_size);
      c.resume = k.resume_auto ? "auto" : dir;
      if (k.resume_auto) c.out_dir = dir;  // a layout over both ranks: one run directory
      Trainer resumed(c, true, g);
      ASSERT_EQ(resumed.step(), 5);
      const int64_t V = resumed.config().model.vocab_size, new_rows = resumed.config().model.resolved_padded_vocab();
      const State loaded = state_of(resumed);
      ASSERT_EQ(loaded.size(), saved.size());
      bool repadded = false;
      for (const auto& [name, values] : saved) {
        const std::vector<float>& got = loaded.at(name);
        if (!name.ends_with("embedding.wte")) {
          EXPECT_EQ(got, values) << name;
          continue;
        }
        const int64_t old_rows = static_cast<int64_t>(values.size()) / C;
        repadded |= old_rows != new_rows;
        ASSERT_EQ(static_cast<int64_t>(got.size()), new_rows * C) << name;
        const auto kept = static_cast<std::ptrdiff_t>(std::min(old_rows, new_rows) * C);
        EXPECT_TRUE(std::equal(got.begin(), got.begin() + kept, values.begin())) << name << ": rows both tables hold";
        EXPECT_TRUE(std::all_of(got.begin() + kept, got.end(), [](float x) { return x == 0.0f; }))
            << name << ": rows past the stored table start at zero";
      }
      EXPECT_TRUE(repadded) << "the case must change the table's rows";
      TrainingRun got = run(resumed);
      const TrainingRun serial = vocabulary_rows(want, V);
      got = vocabulary_rows(got, V);
      expect_equivalent(got, {std::vector<float>(want.losses.end() - 5, want.losses.end()), serial.names, serial.params,
                                      want.adamw_bound},
                        c, what.str(), Tolerances{.param = 1e-3, .adamw_bound = true});
    });
    remove_shared_dir(dir, world());
  }
}

TEST(ReshardErrors, AMissingRankFileFailsTheResumeOnEveryRank) {
  const int p = world().size();
  if (p < 2) GTEST_SKIP() << "needs 2 ranks";
  // ZeRO-3: rank 1 alone reads rank-00001's shards, yet every rank must stop with its message.
  const std::string dir = fresh_shared_dir("loom_reshard_missing", world());
  TrainConfig c = config_of(L(p, 1, 1, 3), 2 * p, 1);
  c.out_dir = dir;
  {
    Trainer saver(c, true, &world());
    saver.save_checkpoint_now();
  }
  world().barrier();
  if (world().rank() == 0) std::filesystem::remove(std::filesystem::path(dir) / "checkpoint-00000000" / "rank-00001.safetensors");
  world().barrier();
  c.resume = dir;
  const std::string error = loom::testing::error_of([&] { Trainer resumed(c, true, &world()); });
  EXPECT_NE(error.find("rank 1: checkpoint '"), std::string::npos) << error;
  EXPECT_NE(error.find("is missing its rank file 'rank-00001.safetensors' (named by its manifest)"), std::string::npos)
      << error;
  remove_shared_dir(dir, world());
}

}  // namespace
}  // namespace loom::train
