// Fuzzing the readers of files a user hands Loom: checkpoints (safetensors header, JSON,
// offsets, data and checksum, then the stored configuration and tokenizer as `loom sample`
// reads them) and text datasets (UTF-8 decoding, tokenizers, batches). Every mutated input
// loads or gives a loom::Error; a checkpoint that loads is bit-identical in its tensors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "fuzz/mutator.hpp"
#include "loom/data/text_dataset.hpp"
#include "loom/data/tokenizer.hpp"
#include "loom/error.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/optim/adamw.hpp"
#include "loom/train/checkpoint.hpp"
#include "loom/train/config.hpp"
#include "loom/train/safetensors.hpp"
#include "test_util.hpp"

namespace loom::train {
namespace {

namespace fs = std::filesystem;

fs::path fuzz_dir(const std::string& name) {
  return loom::testing::fresh_temp_dir("loom_fuzz_" + name + "_" + std::to_string(::getpid()));
}

void write_all(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

TEST(Fuzz, CheckpointReader) {
  const fs::path dir = fuzz_dir("checkpoint");
  const nn::GPTConfig tiny{.vocab_size = 5, .block_size = 4, .n_layer = 1, .n_head = 1, .n_embd = 4};
  nn::GPT model(tiny, 1);
  optim::AdamW opt(model.parameters(), {});
  TrainConfig config;
  const std::string saved = save_checkpoint((dir / "run").string(), model, &opt, "adamw",
                                            {3, to_toml(config), "char:\nabcd", "adamw"}, 1);
  TensorFile small;
  small.tensors = {{"x", Tensor::zeros({2, 2})}, {"i", Tensor::zeros({3}, DType::I32)}};
  small.metadata = {{"loom.kind", "loom-checkpoint"}, {"step", "1"}, {"config", ""}, {"tokenizer", "byte"},
                    {"optimizer", "sgd"}};
  save_tensor_file((dir / "small.safetensors").string(), small);
  const std::vector<std::string> seeds = {loom::testing::read_file(saved), loom::testing::read_file(dir / "small.safetensors")};

  const std::map<std::string, Tensor> destinations = checkpoint_tensors(model, &opt);
  const std::string path = (dir / "input.safetensors").string();
  const testing::FuzzResult r = testing::fuzz_for("checkpoint", seeds, [&](const std::string& bytes) {
    write_all(path, bytes);
    const TensorFile f = load_tensor_file(path);
    const CheckpointInfo info = read_checkpoint_info(path);
    // What `loom sample` and a resume do next with an accepted file.
    data::Tokenizer::from_spec(info.tokenizer_spec);
    TrainConfig stored;
    apply_toml_string(stored, info.config_toml, "checkpoint");
    if (f.tensors.size() == destinations.size()) load_checkpoint(path, destinations, "adamw");
  }, 8.0);
  EXPECT_EQ(r.failure, "");
  EXPECT_GT(r.accepted, 0);
  EXPECT_GT(r.rejected, 0);
  testing::print_summary(r, "checkpoint");
  fs::remove_all(dir);
}

// The first byte picks the tokenizer; the rest is the text file.
TEST(Fuzz, DatasetAndTokenizers) {
  const fs::path dir = fuzz_dir("dataset");
  const std::string shakespeare = loom::testing::read_file(LOOM_SOURCE_DIR "/data/tinyshakespeare.txt").substr(0, 600);
  const std::vector<std::string> seeds = {"c" + shakespeare, "b" + shakespeare,
                                          "cĀ quick brown 🦊 jumps over the lazy dog, ünïcödé ✓ ✓ ✓ ✓ ✓ ✓ ✓",
                                          "b\x00\x01\x02\xff\xfe binary and text mixed, repeated to be long enough " +
                                              std::string(64, 'x')};
  const std::string path = (dir / "input.txt").string();
  const testing::FuzzResult r = testing::fuzz_for("dataset", seeds, [&](const std::string& input) {
    const std::string text = input.empty() ? "" : input.substr(1);
    write_all(path, text);
    const data::TextDataset d(path, !input.empty() && input[0] == 'b' ? "byte" : "char", 4);
    for (const data::Split split : {data::Split::Train, data::Split::Val})
      for (int64_t step = 0; step < 3; ++step) d.batch(split, 7, step, 0, 2, 4);
    // A tokenizer rebuilt from its spec (as a checkpoint stores it) encodes the text alike.
    const auto again = data::Tokenizer::from_spec(d.tokenizer().spec());
    const std::vector<int32_t> ids = again->encode(text);
    if (again->decode(ids) != text) throw std::logic_error("decode(encode(text)) differs from the text");
  }, 8.0);
  EXPECT_EQ(r.failure, "");
  EXPECT_GT(r.accepted, 0);
  EXPECT_GT(r.rejected, 0);
  testing::print_summary(r, "dataset");
  fs::remove_all(dir);
}

// Tokenizer specs come from checkpoint metadata: any string is a tokenizer or an error.
TEST(Fuzz, TokenizerSpecs) {
  const std::vector<std::string> seeds = {"byte", "char:\n !abcdefgh", "char:αβγ🦊", "char:"};
  const testing::FuzzResult r = testing::fuzz_for("tokenizer spec", seeds, [](const std::string& spec) {
    const auto t = data::Tokenizer::from_spec(spec);
    std::vector<int32_t> ids;
    for (int32_t i = 0; i < t->vocab_size() && i < 64; ++i) ids.push_back(i);
    t->decode(ids);
  }, 2.0);
  EXPECT_EQ(r.failure, "");
  EXPECT_GT(r.accepted, 0);
}

}  // namespace
}  // namespace loom::train
