// Tensor files and checkpoints: round trip, atomic replacement, and every corruption
// (truncation, bit flips, wrong version, wrong shapes) is a clear error; a full disk leaves
// the earlier checkpoints as they were. (Random mutations: tests/fuzz/test_fuzz_readers.cpp.)
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "loom/error.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/optim/adamw.hpp"
#include "loom/tensor/memory_tracker.hpp"
#include "loom/train/checkpoint.hpp"
#include "loom/train/safetensors.hpp"
#include "loom/train/sharded_checkpoint.hpp"
#include "test_util.hpp"

namespace loom::train {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) { return loom::testing::fresh_temp_dir("loom_ckpt_" + name); }

void write_all(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

std::string error_loading(const fs::path& p) {
  try {
    load_tensor_file(p.string());
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TensorFile sample_file() {
  TensorFile f;
  Tensor a = Tensor::empty({2, 3});
  for (int i = 0; i < 6; ++i) a.f32()[i] = 0.5f * static_cast<float>(i);
  Tensor ids = Tensor::empty({4}, DType::I32);
  for (int i = 0; i < 4; ++i) ids.i32()[i] = 10 * i;
  f.tensors = {{"a", a}, {"ids", ids}, {"empty", Tensor::empty({0, 3})}};
  f.metadata = {{"note", "hello"}};
  return f;
}

TEST(TensorFile, RoundTrip) {
  const fs::path p = fresh_dir("roundtrip") / "x.safetensors";
  save_tensor_file(p.string(), sample_file());
  TensorFile g = load_tensor_file(p.string());
  EXPECT_EQ(g.metadata.at("note"), "hello");
  EXPECT_EQ(g.tensors.at("a").shape(), (Shape{2, 3}));
  EXPECT_EQ(g.tensors.at("a").f32()[5], 2.5f);
  EXPECT_EQ(g.tensors.at("ids").i32()[3], 30);
  EXPECT_EQ(g.tensors.at("empty").numel(), 0);
  // No temp files are left behind by the atomic write.
  int files = 0;
  for (auto& e : fs::directory_iterator(p.parent_path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST(TensorFile, TruncatedFilesAreErrors) {
  const fs::path dir = fresh_dir("truncated");
  save_tensor_file((dir / "ok.safetensors").string(), sample_file());
  const std::string bytes = loom::testing::read_file(dir / "ok.safetensors");
  for (size_t keep : {size_t{0}, size_t{5}, size_t{8}, size_t{40}, bytes.size() - 1}) {
    write_all(dir / "cut.safetensors", bytes.substr(0, keep));
    const std::string err = error_loading(dir / "cut.safetensors");
    EXPECT_NE(err.find("truncated"), std::string::npos) << "kept " << keep << ": " << err;
  }
  EXPECT_NE(error_loading(dir / "missing.safetensors").find("cannot open"), std::string::npos);
}

TEST(TensorFile, EveryBitFlipInTheDataIsDetected) {
  const fs::path dir = fresh_dir("bitflip");
  save_tensor_file((dir / "ok.safetensors").string(), sample_file());
  const std::string bytes = loom::testing::read_file(dir / "ok.safetensors");
  const size_t data_begin = bytes.size() - 6 * 4 - 4 * 4;
  for (size_t i = data_begin; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] ^= 0x10;
    write_all(dir / "bad.safetensors", bad);
    EXPECT_NE(error_loading(dir / "bad.safetensors").find("corrupted"), std::string::npos) << "byte " << i;
  }
}

TEST(TensorFile, CorruptedHeaderAndWrongVersionAreErrors) {
  const fs::path dir = fresh_dir("header");
  save_tensor_file((dir / "ok.safetensors").string(), sample_file());
  std::string bytes = loom::testing::read_file(dir / "ok.safetensors");
  std::string bad = bytes;
  bad[8] = '#';  // the header's opening brace
  write_all(dir / "bad.safetensors", bad);
  EXPECT_NE(error_loading(dir / "bad.safetensors").find("corrupted header"), std::string::npos);
  std::string other = bytes;
  const size_t at = other.find("\"loom.format_version\":\"1\"");
  ASSERT_NE(at, std::string::npos);
  other[at + 23] = '9';
  write_all(dir / "v9.safetensors", other);
  EXPECT_NE(error_loading(dir / "v9.safetensors").find("format version '9'"), std::string::npos);
  std::string shape = bytes;
  const size_t s = shape.find("\"shape\":[2,3]");
  ASSERT_NE(s, std::string::npos);
  shape[s + 9] = '3';  // (3, 3) no longer matches its byte range
  write_all(dir / "shape.safetensors", shape);
  EXPECT_NE(error_loading(dir / "shape.safetensors").find("does not match"), std::string::npos);
}

nn::GPTConfig tiny() { return {.vocab_size = 11, .block_size = 8, .n_layer = 1, .n_head = 2, .n_embd = 8}; }

TEST(Checkpoint, SavesModelAndOptimizerAndKeepsTheNewest) {
  const fs::path dir = fresh_dir("ckpt");
  nn::GPT model(tiny(), 1);
  optim::AdamW opt(model.parameters(), {});
  opt.state().begin()->second.fill_(0.25f);
  opt.set_steps_taken(7);
  for (int64_t step : {10, 20, 30}) save_checkpoint(dir.string(), model, &opt, "adamw", {step, "[model]\n", "byte", "adamw"}, 2);
  EXPECT_FALSE(fs::exists(dir / "checkpoint-00000010.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "checkpoint-00000020.safetensors"));
  EXPECT_EQ(resolve_checkpoint_path(dir.string()), fs::canonical(dir / "checkpoint-00000030.safetensors").string());

  nn::GPT other(tiny(), 2);
  optim::AdamW other_opt(other.parameters(), {});
  const CheckpointInfo info = load_checkpoint(resolve_checkpoint_path(dir.string()), other, &other_opt, "adamw");
  EXPECT_EQ(info.step, 30);
  EXPECT_EQ(other_opt.steps_taken(), 7);
  EXPECT_EQ(other_opt.state().begin()->second.f32()[0], 0.25f);
  auto a = model.parameters(), b = other.parameters();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(0, std::memcmp(a[i]->value().raw(), b[i]->value().raw(), a[i]->value().nbytes())) << a[i]->name();
}

TEST(Checkpoint, AResumedBranchKeepsItsOwnCheckpointsOverTheStepsItAbandoned) {
  // Steps 10, 20, 30 saved; then a run resumed from 10 saves 11 and 12 (keep 3): the three
  // written last stay, not the three highest steps (11 and 12 were removed before). A
  // single-file save that died leaves a temporary file, removed at the next save.
  const fs::path dir = fresh_dir("ckpt_branch");
  nn::GPT model(tiny(), 1);
  for (int64_t step : {10, 20, 30}) save_checkpoint(dir.string(), model, nullptr, "adamw", {step, "[model]\n", "byte", "adamw"}, 3);
  std::ofstream(dir / ".checkpoint-00000031.safetensors.tmp.999999") << "a writer killed mid-save";
  for (int64_t step : {11, 12}) save_checkpoint(dir.string(), model, nullptr, "adamw", {step, "[model]\n", "byte", "adamw"}, 3);
  EXPECT_TRUE(fs::exists(dir / "checkpoint-00000011.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "checkpoint-00000012.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "checkpoint-00000030.safetensors")) << "the newest of the abandoned steps, third";
  EXPECT_FALSE(fs::exists(dir / "checkpoint-00000020.safetensors"));
  EXPECT_FALSE(fs::exists(dir / ".checkpoint-00000031.safetensors.tmp.999999"));
  EXPECT_EQ(resolve_checkpoint_path(dir.string()), fs::canonical(dir / "checkpoint-00000012.safetensors").string());
}

TEST(Checkpoint, WrongModelShapeOrOptimizerIsAnError) {
  const fs::path dir = fresh_dir("mismatch");
  nn::GPT model(tiny(), 1);
  const std::string path = save_checkpoint(dir.string(), model, nullptr, "adamw", {1, "", "byte", "adamw"}, 1);
  nn::GPTConfig wider = tiny();
  wider.n_embd = 16;
  nn::GPT other(wider, 1);
  try {
    load_checkpoint(path, other, nullptr, "");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'model.blocks.0.attn.proj.bias' is (8), the model expects (16)"),
              std::string::npos)
        << e.what();
  }
  optim::AdamW opt(model.parameters(), {});
  EXPECT_THROW(load_checkpoint(path, model, &opt, "sgd"), Error);
  EXPECT_THROW(resolve_checkpoint_path((dir / "nothing-here").string()), Error);
}

// Loading a model for inference reads its weights, not the optimizer's moments beside them (a
// single-file checkpoint under AdamW holds three times the weights' bytes): one tensor at a
// time, while the checksum read on opening still covers the whole file.
TEST(Checkpoint, ASingleFileCheckpointReadsOnlyTheTensorsALoadFills) {
  const fs::path dir = fresh_dir("reads_only");
  const nn::GPTConfig config{.vocab_size = 64, .block_size = 16, .n_layer = 1, .n_head = 2, .n_embd = 256};
  nn::GPT model(config, 1);
  optim::AdamW opt(model.parameters(), {});
  const std::string path = save_checkpoint(dir.string(), model, &opt, "adamw", {1, "", "byte", "adamw"}, 1);
  nn::GPT loaded(config, 2);
  std::vector<StatePiece> pieces;
  int64_t weight_bytes = 0, largest = 0;
  for (nn::Parameter* p : loaded.parameters()) {
    const Tensor& v = p->value();
    pieces.push_back({"model." + p->name(), v.shape(), {p->shard_spec(), 0, v.numel()}, v, true, p->padded_past_row()});
    weight_bytes += v.nbytes();
    largest = std::max(largest, v.nbytes());
  }
  ASSERT_GE(static_cast<int64_t>(fs::file_size(path)), 3 * weight_bytes) << "the moments are saved beside the weights";
  MemoryTracker& tracker = MemoryTracker::instance();
  tracker.reset_peaks();
  const int64_t before = tracker.total_current();
  load_state(path, pieces, "");
  EXPECT_LE(tracker.total_peak() - before, largest) << "read more than one tensor at a time";
  const std::vector<nn::Parameter*> saved = model.parameters(), read = loaded.parameters();
  for (size_t i = 0; i < saved.size(); ++i)
    ASSERT_EQ(0, std::memcmp(saved[i]->value().raw(), read[i]->value().raw(), saved[i]->value().nbytes())) << saved[i]->name();

  // A bit flipped in a moment the load does not read is found on opening all the same.
  std::string bytes = loom::testing::read_file(path);
  bytes[bytes.size() - 5] ^= 1;  // tensors are laid out in name order: "optim..." after "model..."
  write_all(path, bytes);
  std::string error = "(no error)";
  try {
    load_state(path, pieces, "");
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("is corrupted: checksum"), std::string::npos) << error;
}

// A full disk, simulated by a file-size limit (with SIGXFSZ ignored, writes past it fail
// with EFBIG as they would with ENOSPC): a clear error, no partial or temporary file, and
// the earlier checkpoints and `latest` untouched.
TEST(Checkpoint, DiskFullLeavesEarlierCheckpointsAndLatestIntact) {
  const fs::path dir = fresh_dir("disk_full");
  nn::GPT model(tiny(), 1);
  optim::AdamW opt(model.parameters(), {});
  const std::string first = save_checkpoint(dir.string(), model, &opt, "adamw", {1, "", "byte", "adamw"}, 2);
  const std::string first_bytes = loom::testing::read_file(first);
  rlimit old{};
  ASSERT_EQ(0, getrlimit(RLIMIT_FSIZE, &old));
  const auto previous_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = first_bytes.size() / 2;
  ASSERT_EQ(0, setrlimit(RLIMIT_FSIZE, &small));
  std::string error = "(no error)";
  try {
    save_checkpoint(dir.string(), model, &opt, "adamw", {2, "", "byte", "adamw"}, 2);
  } catch (const Error& e) {
    error = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, previous_handler);
  EXPECT_NE(error.find("cannot write '" + (dir / "checkpoint-00000002.safetensors").string() + "': File too large"),
            std::string::npos)
      << error;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"checkpoint-00000001.safetensors", "latest"}));
  EXPECT_EQ(resolve_checkpoint_path(dir.string()), fs::canonical(first).string());
  EXPECT_EQ(loom::testing::read_file(first), first_bytes);
  EXPECT_EQ(load_checkpoint(first, model, &opt, "adamw").step, 1);
}

}  // namespace
}  // namespace loom::train
