// Distributed checkpoints in one process: re-sharding pieces against the obviously-correct
// twin (cut the full tensor with copy_shard), a sharded checkpoint's layout on disk and
// bit-exact resume, retention, a writer that died before its manifest, and every damaged
// or hostile checkpoint (no manifest, a file outside the directory, a missing rank file,
// a bad checksum, pieces that do not cover a tensor, a 3D weight's second split that does
// not fit) as a clear error naming the problem.
// Multi-rank layouts are tested in tests/parallel/test_reshard.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "loom/data/tokenizer.hpp"
#include "loom/error.hpp"
#include "loom/train/checkpoint.hpp"
#include "loom/train/checkpoint_manifest.hpp"
#include "loom/train/reshard.hpp"
#include "loom/train/sharded_checkpoint.hpp"
#include "loom/train/trainer.hpp"
#include "test_util.hpp"
#include "train/tiny_run.hpp"

namespace loom::train {
namespace {

namespace fs = std::filesystem;

// The twin: elements [begin, end) of the slice cut from the full tensor by copy_shard.
std::vector<float> cut(const Tensor& full, const PieceLayout& p) {
  Tensor slice = Tensor::empty(slice_shape(full.shape(), p.spec, "test"));
  nn::copy_shard(full, slice, p.spec);
  return std::vector<float>(slice.f32() + p.begin, slice.f32() + p.end);
}

// The pieces of a layout: tp slices (spec with parts, and parts2 for a second split), each
// cut into `ranges` flat ranges of uneven sizes (ZeRO shards of different units).
std::vector<PieceLayout> layout_pieces(const Shape& full, nn::ShardSpec spec, int64_t ranges) {
  std::vector<PieceLayout> out;
  for (int64_t i = 0; i < spec.parts; ++i)
    for (int64_t j = 0; j < spec.parts2; ++j) {
      spec.index = i;
      spec.index2 = j;
      const int64_t n = shape_numel(slice_shape(full, spec, "test"));
      int64_t begin = 0;
      for (int64_t r = 0; r < ranges; ++r) {
        const int64_t end = r + 1 == ranges ? n : begin + (n / ranges) + (r % 2);  // uneven
        out.push_back({spec, begin, end});
        begin = end;
      }
    }
  return out;
}

// Every piece of every layout, assembled from any layout's pieces (stored as cut from full),
// holds what copy_shard cuts for it: the tensor's elements, and 0 in a padded piece's padding.
void expect_every_layout_assembles(const Tensor& full, const std::vector<std::vector<PieceLayout>>& layouts) {
  for (size_t a = 0; a < layouts.size(); ++a) {
    check_tiling("layout " + std::to_string(a), full.shape(), layouts[a]);
    std::vector<std::vector<float>> stored;  // layout a's pieces as stored data
    for (const PieceLayout& p : layouts[a]) stored.push_back(cut(full, p));
    for (size_t b = 0; b < layouts.size(); ++b)
      for (const PieceLayout& dst : layouts[b]) {
        std::vector<float> got(static_cast<size_t>(dst.numel()), 0.0f);
        int64_t copied = 0;
        for (size_t k = 0; k < stored.size(); ++k)
          copied += copy_overlap(full.shape(), layouts[a][k], stored[k].data(), dst, got.data());
        EXPECT_EQ(copied, elements_in_tensor(full.shape(), dst)) << a << " -> " << b;
        EXPECT_EQ(got, cut(full, dst)) << "layout " << a << " -> " << b << " piece [" << dst.begin << ", " << dst.end << ")";
      }
  }
}

TEST(Reshard, EveryPieceAssemblesFromAnyOtherLayoutsPieces) {
  const Shape full_shape{6, 12};
  Tensor full = Tensor::empty(full_shape);
  const std::vector<float> values = testing::random_vector(72, 7);
  std::copy(values.begin(), values.end(), full.f32());
  const std::vector<std::vector<PieceLayout>> layouts = {
      layout_pieces(full_shape, {}, 1),                  // serial
      layout_pieces(full_shape, {}, 5),                  // ZeRO over 5 ranks
      layout_pieces(full_shape, {0, 2, 0, 1}, 1),        // column parallel
      layout_pieces(full_shape, {0, 2, 0, 3}, 2),        // fused QKV (3 blocks), + ZeRO 2
      layout_pieces(full_shape, {1, 2, 0, 1}, 3),        // row parallel, + ZeRO 3
      layout_pieces(full_shape, {1, 3, 0, 2}, 1),        // 3 parts of 2 blocks along dim 1
      layout_pieces(full_shape, {0, 2, 0, 1, 1, 3}, 1),  // 3D: rows over out x depth, columns over in
      layout_pieces(full_shape, {0, 2, 0, 3, 1, 2}, 2),  // 3D fused QKV, + ZeRO 2
      layout_pieces(full_shape, {0, 3, 0, 1, 1, 4}, 1),  // 3D, another grid
  };
  expect_every_layout_assembles(full, layouts);
}

// Layouts that pad a split dimension to equal pieces (a 3D GCN's widths): the pieces' runs
// leave the padding out, so any padded layout assembles from any other and from the serial
// tensor, elements in the tensor only, and a cut piece's padding is 0.
TEST(Reshard, PaddedPiecesAssembleWithoutTheirPadding) {
  const Shape full_shape{5, 7};
  Tensor full = Tensor::empty(full_shape);
  const std::vector<float> values = testing::random_vector(35, 11);
  std::copy(values.begin(), values.end(), full.f32());
  auto padded = [](nn::ShardSpec spec, int64_t pad, int64_t pad2) {
    spec.pad = pad;
    spec.pad2 = pad2;
    return spec;
  };
  const std::vector<std::vector<PieceLayout>> layouts = {
      layout_pieces(full_shape, {}, 1),                                         // serial
      layout_pieces(full_shape, {}, 3),                                         // ZeRO over 3 ranks
      layout_pieces(full_shape, padded({0, 2, 0, 1, 1, 2}, 1, 1), 1),           // 6 x 8 in 2 x 2 pieces
      layout_pieces(full_shape, padded({0, 3, 0, 1}, 1, 0), 2),                 // 6 rows in 3 parts, + ZeRO 2
      layout_pieces(full_shape, padded({1, 4, 0, 1}, 1, 0), 1),                 // 8 columns in 4 parts
      layout_pieces(full_shape, padded({0, 1, 0, 1, 1, 3}, 0, 2), 1),           // columns only, 9 in 3 parts
  };
  expect_every_layout_assembles(full, layouts);
  // The whole again from a padded layout's pieces (a single-file checkpoint's gather).
  nn::ShardSpec spec = padded({0, 2, 0, 1, 1, 2}, 1, 1);
  Tensor whole = Tensor::zeros(full_shape);
  for (spec.index = 0; spec.index < 2; ++spec.index)
    for (spec.index2 = 0; spec.index2 < 2; ++spec.index2) {
      Tensor piece = Tensor::empty(slice_shape(full_shape, spec, "test"));
      EXPECT_EQ(spec.full_shape(piece.shape()), full_shape);
      nn::copy_shard(full, piece, spec);
      nn::place_shard(piece, whole, spec);
    }
  EXPECT_EQ(std::vector<float>(whole.f32(), whole.f32() + 35), values);
  // The manifest keeps the padding; a padding that does not fit is named.
  const nn::ShardSpec back = slice_from_json(slice_to_json(spec), "test");
  EXPECT_EQ(back.pad, 1);
  EXPECT_EQ(back.pad2, 1);
  EXPECT_NE(testing::error_of([&] { slice_shape(full_shape, padded({0, 2, 0, 1}, 2, 0), "w"); }).find("dim 0 of (5, 7) padded by 2 does not split into 2 parts"),
            std::string::npos)
      << testing::error_of([&] { slice_shape(full_shape, padded({0, 2, 0, 1}, 2, 0), "w"); });
  EXPECT_NE(testing::error_of([&] { slice_shape(full_shape, padded({}, 1, 0), "w"); }).find("padding 1 without a split"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { slice_shape(full_shape, padded({0, 2, 0, 1}, -1, 0), "w"); }).find("padding -1 is not a length"),
            std::string::npos);
}

using testing::error_of;

// A token table padded past its vocabulary (4 rows of 6 here) fills a table of another
// padding from any layout's pieces into any other's: the rows both hold, and nothing of the
// rows only the new table has (a load zeroes them). Only a tensor whose rows past the
// vocabulary are padding, and only while both tables hold the vocabulary, re-pads: any other
// shape difference stays an error naming both shapes.
TEST(Reshard, ATokenTableIsRepaddedBetweenAnyLayoutsAndNothingElseIs) {
  const Shape stored{6, 4};
  Tensor full = Tensor::empty(stored);
  const std::vector<float> values = testing::random_vector(24, 5);
  std::copy(values.begin(), values.end(), full.f32());
  for (const Shape& wanted : {Shape{4, 4}, Shape{8, 4}, Shape{12, 4}}) {
    const int64_t kept = std::min(stored[0], wanted[0]) * 4;
    EXPECT_TRUE(repadding_fits(stored, wanted, 4));
    for (const std::vector<PieceLayout>& from : {layout_pieces(stored, {}, 1), layout_pieces(stored, {0, 2, 0, 1}, 2)})
      for (const std::vector<PieceLayout>& to :
           {layout_pieces(wanted, {}, 1), layout_pieces(wanted, {}, 3), layout_pieces(wanted, {0, 2, 0, 1}, 1),
            layout_pieces(wanted, {0, 4, 0, 1}, 2)}) {
        Tensor got = Tensor::zeros(wanted);
        for (const PieceLayout& dst : to) {
          std::vector<float> piece(static_cast<size_t>(dst.numel()), 0.0f);
          int64_t copied = 0;
          for (const PieceLayout& src : from)
            copied += copy_overlap(stored, src, cut(full, src).data(), wanted, dst, piece.data());
          EXPECT_EQ(copied, elements_in_tensor(wanted, dst, shape_numel(stored)));
          for (const nn::ShardRun& r : piece_runs(wanted, dst))
            std::copy_n(piece.data() + r.local_offset, r.n, got.f32() + r.full_offset);
        }
        std::vector<float> want(values.begin(), values.begin() + kept);
        want.resize(static_cast<size_t>(shape_numel(wanted)), 0.0f);
        EXPECT_EQ(std::vector<float>(got.f32(), got.f32() + got.numel()), want) << shape_str(wanted);
      }
  }
  EXPECT_FALSE(repadding_fits(stored, {8, 5}, 4)) << "another width";
  EXPECT_FALSE(repadding_fits(stored, {6, 4, 1}, 4)) << "another rank";
  EXPECT_FALSE(repadding_fits(stored, {3, 4}, 4)) << "fewer rows than the vocabulary";
  EXPECT_FALSE(repadding_fits({3, 4}, {8, 4}, 4)) << "a stored table short of the vocabulary";
  EXPECT_FALSE(repadding_fits(stored, {8, 4}, 0)) << "no padding: every row counts";

  // Through a checkpoint file: the padded table loads re-padded, a tensor without padding is refused.
  const std::string path = (testing::fresh_temp_dir("loom_repad") / "checkpoint-00000000.safetensors").string();
  // Its own configuration and tokenizer give its 6 rows: 4 characters, padded_vocab_size 6.
  TrainConfig saved;
  saved.model.padded_vocab_size = 6;
  CheckpointInfo info;
  info.config_toml = to_toml(saved);
  info.tokenizer_spec = data::Tokenizer::create("char", "abcd")->spec();
  write_checkpoint_file(path, {{"model.wte", full}, {"model.w", full}}, info);
  Tensor table = Tensor::empty({8, 4}), w = Tensor::empty({8, 4});
  table.fill_(7.0f);  // what the model held: the rows past the stored ones become 0
  load_state(path, {{"model.wte", {8, 4}, whole_piece({8, 4}), table, true, 4}}, "");
  std::vector<float> want(values);
  want.resize(32, 0.0f);
  EXPECT_EQ(std::vector<float>(table.f32(), table.f32() + 32), want);
  EXPECT_EQ(error_of([&] { load_state(path, {{"model.w", {8, 4}, whole_piece({8, 4}), w, true}}, ""); }),
            "checkpoint '" + path + "': tensor 'model.w' is (6, 4), the model expects (8, 4)");
  EXPECT_EQ(error_of([&] { load_state(path, {{"model.wte", {3, 4}, whole_piece({3, 4}), Tensor::empty({3, 4}), true, 4}}, ""); }),
            "checkpoint '" + path + "': tensor 'model.wte' is (6, 4), the model expects (3, 4)");
  // A table that is not its checkpoint's own (a configuration whose padding, resolved for its
  // tokenizer's 4 characters, is 64 rows, not the table's 6) is named before any re-padding.
  saved.model.padded_vocab_size = 0;
  info.config_toml = to_toml(saved);
  write_checkpoint_file(path, {{"model.wte", full}}, info);
  EXPECT_EQ(error_of([&] { load_state(path, {{"model.wte", {8, 4}, whole_piece({8, 4}), table, true, 4}}, ""); }),
            "checkpoint '" + path + "': its token table has 6 rows, its own configuration and tokenizer (char with 4 "
            "symbols) give 64: the tokenizer or the configuration does not belong to these weights");
}

TEST(Reshard, PiecesThatDoNotTileATensorAreNamed) {
  const Shape s{4, 4};
  EXPECT_NE(error_of([&] { check_tiling("w", s, {{{}, 0, 7}, {{}, 9, 16}}); }).find("tensor 'w' (4, 4): elements [7, 9) are in no piece"),
            std::string::npos)
      << error_of([&] { check_tiling("w", s, {{{}, 0, 7}, {{}, 9, 16}}); });
  EXPECT_NE(error_of([&] { check_tiling("w", s, {{{}, 0, 9}, {{}, 7, 16}}); }).find("elements [7, 9) are in two pieces"),
            std::string::npos);
  EXPECT_NE(error_of([&] { check_tiling("w", s, {{{}, 0, 12}}); }).find("elements [12, 16) are in no piece"), std::string::npos);
  EXPECT_NE(error_of([&] { check_piece(s, {{0, 3, 0, 1}, 0, 4}, "w"); }).find("does not split into 3 parts"),
            std::string::npos);
}

// A checkpoint against the tensors the model has: the missing ones named (the first four,
// then a count) with their shapes, a shape that differs named with both; extra tensors pass.
TEST(ShardedCheckpoint, TensorsTheModelHasAndACheckpointLacksAreNamed) {
  const StateShapes held{{"model.a", {4}}, {"model.b", {2, 3}}, {"model.extra", {1}}};
  EXPECT_EQ(error_of([&] { check_holds_every_tensor(held, {{"model.a", {4}}, {"model.b", {2, 3}}}, "ckpt"); }),
            "(no error)");
  StateShapes expected = held;
  for (const char* name : {"optim.m.a", "optim.m.b", "optim.v.a", "optim.v.b", "optim.v.c"}) expected[name] = {4};
  EXPECT_EQ(error_of([&] { check_holds_every_tensor(held, expected, "ckpt", "; nothing saved"); }),
            "ckpt has no tensor 'optim.m.a' (4), 'optim.m.b' (4), 'optim.v.a' (4), 'optim.v.b' (4) and 1 more "
            "(5 of the 8 tensors of the model and optimizer state); nothing saved");
  EXPECT_EQ(error_of([&] { check_holds_every_tensor(held, {{"model.b", {3, 2}}}, "ckpt"); }),
            "ckpt: tensor 'model.b' is (2, 3), the model expects (3, 2)");
}

TrainConfig sharded_run(const std::string& name) {
  TrainConfig c = tiny_run("sharded_" + name);
  c.checkpoint_format = "sharded";
  return c;
}

TEST(ShardedCheckpoint, WritesRankFilesAndManifestAndResumesBitExactly) {
  TrainConfig c = sharded_run("resume");
  Trainer straight(c, true);
  const std::vector<float> all = losses_of(straight, 6);
  Trainer first(c, true);
  losses_of(first, 3);
  const std::string path = first.save_checkpoint_now();
  const fs::path dir = fs::path(c.out_dir) / "checkpoint-00000003";
  EXPECT_EQ(path, dir.string());
  EXPECT_TRUE(fs::exists(dir / "manifest.json"));
  EXPECT_TRUE(fs::exists(dir / "rank-00000.safetensors"));
  EXPECT_FALSE(fs::exists(fs::path(c.out_dir) / "checkpoint-00000003.tmp"));
  EXPECT_EQ(fs::read_symlink(fs::path(c.out_dir) / "latest"), "checkpoint-00000003");
  const Manifest m = read_manifest(dir.string());
  EXPECT_EQ(m.info.step, 3);
  EXPECT_EQ(m.info.optimizer, "adamw");
  EXPECT_EQ(m.tensors.at("model.embedding.wte").shape, (Shape{128, 16}));

  TrainConfig resumed_config = c;
  resumed_config.resume = "latest";
  Trainer resumed(resumed_config, true);
  EXPECT_EQ(resumed.step(), 3);
  const std::vector<float> rest = losses_of(resumed, 6);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(rest[i], all[3 + i]) << "step " << 4 + i;  // bit-identical
  // `loom sample`'s path: the serial model loads from the directory too.
  nn::GPT model(straight.model().config(), 0);
  load_checkpoint(resolve_checkpoint_path(c.out_dir), model, nullptr, "");
  auto want = first.model().parameters(), got = model.parameters();
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(0, std::memcmp(want[i]->value().raw(), got[i]->value().raw(), want[i]->value().nbytes())) << want[i]->name();
}

TEST(ShardedCheckpoint, RetentionKeepsTheNewestCompleteOnesAndADeadWriterIsIgnored) {
  TrainConfig c = sharded_run("retention");
  c.keep_checkpoints = 2;
  Trainer t(c, true);
  for (int64_t step : {1, 2, 3}) {
    losses_of(t, step);
    t.save_checkpoint_now();
  }
  const fs::path run(c.out_dir);
  EXPECT_FALSE(fs::exists(run / "checkpoint-00000001"));
  EXPECT_TRUE(fs::exists(run / "checkpoint-00000002"));
  // A writer that died before its manifest (simulated: the manifest deleted), and one that
  // died before renaming its directory: resume takes the newest complete checkpoint.
  fs::remove(run / "checkpoint-00000003" / "manifest.json");
  fs::create_directory(run / "checkpoint-00000009.tmp");
  fs::copy_file(run / "checkpoint-00000002" / "rank-00000.safetensors", run / "checkpoint-00000009.tmp" / "rank-00000.safetensors");
  EXPECT_EQ(resolve_checkpoint_path(c.out_dir), fs::canonical(run / "checkpoint-00000002").string());
  TrainConfig again = c;
  again.resume = "latest";
  Trainer resumed(again, true);
  EXPECT_EQ(resumed.step(), 2);
  // Naming the incomplete checkpoint itself is an error, never a load.
  EXPECT_NE(error_of([&] { load_checkpoint((run / "checkpoint-00000003").string(), resumed.model(), nullptr, ""); })
                .find("has no manifest.json (an incomplete checkpoint"),
            std::string::npos);
  // The next complete checkpoint clears the partial older ones and keeps two complete ones.
  losses_of(resumed, 4);
  resumed.save_checkpoint_now();
  EXPECT_FALSE(fs::exists(run / "checkpoint-00000003"));
  EXPECT_TRUE(fs::exists(run / "checkpoint-00000002"));
  EXPECT_TRUE(fs::exists(run / "checkpoint-00000004"));
  EXPECT_TRUE(fs::exists(run / "checkpoint-00000009.tmp"));  // newer: not this writer's to remove
}

// A saved sharded checkpoint, damaged by `damage`, fails to load with a message containing want.
void expect_load_error(const std::string& name, const std::function<void(const fs::path&)>& damage,
                       const std::string& want) {
  TrainConfig c = sharded_run("damaged_" + name);
  Trainer t(c, true);
  losses_of(t, 1);
  const fs::path dir = t.save_checkpoint_now();
  damage(dir);
  const std::string error = error_of([&] { load_checkpoint(dir.string(), t.model(), &t.optimizer(), "adamw"); });
  EXPECT_NE(error.find(want), std::string::npos) << name << ": " << error;
}

void edit_manifest(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  std::ifstream in(dir / "manifest.json");
  nlohmann::json j = nlohmann::json::parse(in);
  edit(j);
  std::ofstream(dir / "manifest.json") << j.dump();
}

TEST(ShardedCheckpoint, DamagedOrHostileCheckpointsAreClearErrors) {
  expect_load_error("no_manifest", [](const fs::path& d) { fs::remove(d / "manifest.json"); }, "has no manifest.json");
  expect_load_error(
      "traversal",
      [](const fs::path& d) {
        edit_manifest(d, [](nlohmann::json& j) {
          j["files"]["../../etc/passwd"] = j["files"]["rank-00000.safetensors"];
        });
      },
      "file '../../etc/passwd' is outside the checkpoint directory");
  expect_load_error(
      "absolute",
      [](const fs::path& d) {
        edit_manifest(d, [](nlohmann::json& j) {
          j["tensors"]["model.ln_f.weight"]["pieces"][0]["file"] = "/tmp/rank-00000.safetensors";
        });
      },
      "file '/tmp/rank-00000.safetensors' is outside the checkpoint directory");
  expect_load_error("missing_rank_file", [](const fs::path& d) { fs::remove(d / "rank-00000.safetensors"); },
                    "is missing its rank file 'rank-00000.safetensors'");
  expect_load_error(
      "bad_checksum",
      [](const fs::path& d) {
        std::fstream f(d / "rank-00000.safetensors", std::ios::in | std::ios::out | std::ios::binary);
        f.seekg(-5, std::ios::end);
        char byte = 0;
        f.read(&byte, 1);
        byte ^= 0x10;
        f.seekp(-5, std::ios::end);
        f.write(&byte, 1);
      },
      "rank file 'rank-00000.safetensors' is corrupted (CRC-32");
  expect_load_error(
      "not_covered",
      [](const fs::path& d) {
        edit_manifest(d, [](nlohmann::json& j) { j["tensors"]["model.ln_f.bias"]["pieces"][0]["end"] = 10; });
      },
      "the pieces do not cover the tensor exactly: tensor 'model.ln_f.bias' (16): elements [10, 16) are in no piece");
  expect_load_error(
      "version", [](const fs::path& d) { edit_manifest(d, [](nlohmann::json& j) { j["format_version"] = 99; }); },
      "has format version 99; this Loom reads version 1");
  expect_load_error(
      "missing_field", [](const fs::path& d) { edit_manifest(d, [](nlohmann::json& j) { j.erase("layout"); }); },
      "missing or invalid field 'layout'");
  // A 3D weight's second split, hostile: given in part, along a dimension it cannot split, out
  // of range, or two pieces on the same columns (or none on some).
  const auto second_split = [](const nlohmann::json& slice, int64_t end, int copies) {
    return [=](const fs::path& d) {
      edit_manifest(d, [&](nlohmann::json& j) {
        nlohmann::json& pieces = j["tensors"]["model.embedding.wte"]["pieces"];  // (128, 16), one whole piece
        pieces[0]["slice"] = slice;
        pieces[0]["end"] = end;
        for (int k = 1; k < copies; ++k) pieces.push_back(pieces[0]);
      });
    };
  };
  const nlohmann::json rows = {{"dim", 0}, {"parts", 1}, {"index", 0}, {"blocks", 1}};
  const auto with = [&](int dim2, int64_t parts2, int64_t index2) {
    nlohmann::json s = rows;
    s["dim2"] = dim2;
    s["parts2"] = parts2;
    s["index2"] = index2;
    return s;
  };
  nlohmann::json half = rows;
  half["dim2"] = 1;
  struct Hostile {
    const char* name;
    nlohmann::json slice;
    int64_t end;  // of the first piece
    int copies;   // of that piece
    const char* want;
  };
  const Hostile hostile[] = {
      {"in_part", half, 2048, 1, "tensor 'model.embedding.wte': a second split needs dim2, parts2 and index2 together"},
      {"negative", with(-1, 2, 0), 1024, 1, "tensor 'model.embedding.wte': a second split along dim -1 (dimensions count from 0)"},
      {"not_last", with(0, 2, 0), 1024, 1, "second slice (dim 0, part 0 of 2) does not fit shape (128, 16)"},
      {"out_of_range", with(1, 2, 2), 1024, 1, "second slice (dim 1, part 2 of 2) does not fit shape (128, 16)"},
      {"indivisible", with(1, 3, 0), 640, 1, "second slice (dim 1, part 0 of 3) does not fit shape (128, 16)"},
      {"too_long", with(1, 2, 1), 2048, 1, "element range [0, 2048) lies outside its slice of 1024 elements"},
      {"twice", with(1, 2, 0), 1024, 2, "tensor 'model.embedding.wte' (128, 16): elements [0, 8) are in two pieces"},
      {"gap", with(1, 2, 0), 1024, 1, "tensor 'model.embedding.wte' (128, 16): elements [8, 16) are in no piece"},
  };
  for (const Hostile& h : hostile)
    expect_load_error(std::string("second_split_") + h.name, second_split(h.slice, h.end, h.copies), h.want);
  expect_load_error(
      "truncated", [](const fs::path& d) { fs::resize_file(d / "rank-00000.safetensors", 100); },
      "rank file 'rank-00000.safetensors' is 100 bytes, the manifest says");
}

}  // namespace
}  // namespace loom::train
