// `loom convert --from-gpt2` against PyTorch: tests/train/gpt2_checkpoint_reference.py writes a
// tiny GPT-2 checkpoint in its releases' layout (config.json, model.safetensors with Conv1D
// weights, vocab.json, merges.txt; random weights) and the logits of a GPT-2 forward written
// in PyTorch; the converted Loom model must give the same logits within 1e-5 absolute plus
// 1e-5 relative (both fp32; measured: at most 3.8e-6 apart on logits up to 9.2). Broken checkpoints (a tensor
// missing, a weight in nn.Linear's orientation, an extra block, a malformed config.json) are
// errors naming the file and the problem; the converted checkpoint samples and resumes training.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "loom/data/tokenizer.hpp"
#include "loom/error.hpp"
#include "loom/nn/context.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/train/checkpoint.hpp"
#include "loom/train/gpt2_export.hpp"
#include "loom/train/gpt2_import.hpp"
#include "run_command.hpp"
#include "test_util.hpp"

namespace loom::train {
namespace {

namespace fs = std::filesystem;

fs::path make_reference(const std::string& name) {
  const fs::path dir = testing::fresh_temp_dir(name);
  const std::string cmd = std::string(LOOM_PYTHON) + " " + LOOM_SOURCE_DIR + "/tests/train/gpt2_checkpoint_reference.py " +
                          dir.string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return dir;
}

using testing::error_of;

// model's logits (1, T, Vp) over `tokens` against PyTorch's (T, V) fp32 in `torch_file`: within
// 1e-5 absolute plus 1e-5 relative (both fp32). Returns the model's.
Tensor expect_pytorchs_logits(nn::GPT& model, const std::vector<int32_t>& tokens, const fs::path& torch_file) {
  const auto T = static_cast<int64_t>(tokens.size());
  const int64_t V = model.config().vocab_size, Vp = model.config().resolved_padded_vocab();
  Tensor idx = Tensor::empty({1, T}, DType::I32);
  std::copy(tokens.begin(), tokens.end(), idx.i32());
  nn::Context ctx;
  Tensor logits = model.forward(idx, ctx);
  const std::string torch_bytes = testing::read_file(torch_file);
  EXPECT_EQ(torch_bytes.size(), static_cast<size_t>(T * V * 4));
  if (torch_bytes.size() != static_cast<size_t>(T * V * 4)) return logits;
  std::vector<float> expected(static_cast<size_t>(T * V)), ours(static_cast<size_t>(T * V));
  std::memcpy(expected.data(), torch_bytes.data(), torch_bytes.size());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t v = 0; v < V; ++v) ours[static_cast<size_t>(t * V + v)] = logits.f32()[t * Vp + v];
  EXPECT_TRUE(testing::all_close(ours.data(), expected.data(), T * V, 1e-5, 1e-5, "logits"));
  return logits;
}

TEST(Gpt2Import, LogitsEqualPyTorchsAndBrokenCheckpointsAreErrors) {
  const fs::path ref = make_reference("loom_gpt2_import");
  const fs::path good = ref / "good";
  const std::string converted = (ref / "converted.safetensors").string();
  ASSERT_EQ(convert_gpt2_checkpoint(good.string(), converted), converted);

  const CheckpointInfo info = read_checkpoint_info(converted);
  TrainConfig config;
  apply_toml_string(config, info.config_toml, "stored");
  EXPECT_EQ(config.tokenizer, "gpt2");
  config.model.vocab_size = data::Tokenizer::from_spec(info.tokenizer_spec)->vocab_size();
  ASSERT_EQ(config.model.vocab_size, 269);
  EXPECT_EQ(config.model.resolved_padded_vocab(), 320);
  nn::GPT model(config.model, 99);
  load_checkpoint(converted, model, nullptr, "");

  const std::vector<int32_t> tokens = nlohmann::json::parse(testing::read_file(good / "tokens.json")).get<std::vector<int32_t>>();
  const Tensor logits = expect_pytorchs_logits(model, tokens, good / "logits.f32");
  const int64_t V = config.model.vocab_size, Vp = config.model.resolved_padded_vocab();
  for (int64_t v = V; v < Vp; ++v) EXPECT_EQ(logits.f32()[v], 0.0f);  // padding rows of wte are zero

  auto convert_error = [&](const fs::path& dir) {
    return error_of([&] { read_gpt2_checkpoint(dir.string()); });
  };
  EXPECT_NE(convert_error(ref / "missing").find("has no tensor 'h.1.mlp.c_fc.bias'"), std::string::npos)
      << convert_error(ref / "missing");
  EXPECT_NE(convert_error(ref / "linear_shape").find("tensor 'h.0.attn.c_attn.weight' is (96, 32), config.json's sizes need (32, 96)"),
            std::string::npos)
      << convert_error(ref / "linear_shape");
  EXPECT_NE(convert_error(ref / "extra").find("has tensor 'h.2.ln_1.weight'"), std::string::npos) << convert_error(ref / "extra");
  EXPECT_NE(convert_error(ref / "nowhere").find("does not exist"), std::string::npos);

  const nlohmann::json config_json = nlohmann::json::parse(testing::read_file(good / "config.json"));
  auto with_config = [&](const std::string& text) {
    std::ofstream(ref / "missing" / "config.json") << text;
    return convert_error(ref / "missing");
  };
  nlohmann::json c = config_json;
  c.erase("n_head");
  EXPECT_NE(with_config(c.dump()).find("config.json' has no 'n_head'"), std::string::npos) << with_config(c.dump());
  c = config_json;
  c["n_embd"] = "32";
  EXPECT_NE(with_config(c.dump()).find("'n_embd' must be a positive integer"), std::string::npos);
  c = config_json;
  c["layer_norm_epsilon"] = 1e-6;
  EXPECT_NE(with_config(c.dump()).find("layer_norm_epsilon is 1e-06"), std::string::npos) << with_config(c.dump());
  c = config_json;
  c["vocab_size"] = 50257;
  EXPECT_NE(with_config(c.dump()).find("says vocab_size 50257, its vocab.json has 269 tokens"), std::string::npos);
  EXPECT_NE(with_config("{\"n_embd\": 32,").find("config.json' is not valid JSON"), std::string::npos);
  std::ofstream(ref / "linear_shape" / "model.safetensors") << "not a tensor file";
  EXPECT_NE(convert_error(ref / "linear_shape").find("is not a safetensors file"), std::string::npos)
      << convert_error(ref / "linear_shape");
}

TEST(Gpt2Import, ConvertedCheckpointSamplesWithGpt2TokensAndResumesTraining) {
  const fs::path ref = make_reference("loom_gpt2_import_cli");
  const fs::path good = ref / "good", run = ref / "run";
  testing::CommandResult r = testing::run_loom("convert --from-gpt2 " + good.string() + " --to " + run.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = testing::run_loom("convert --from-gpt2 " + good.string() + " --to " + run.string());
  EXPECT_EQ(r.exit_code, 1) << r.output;  // never over another run
  EXPECT_NE(r.output.find("exists"), std::string::npos) << r.output;
  r = testing::run_loom("sample --checkpoint " + run.string() + " --prompt 'hello world' --tokens 6 --temperature 0 --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("hello world", 0), 0u) << r.output;

  // Training continues from the converted weights on a text tokenized with the same files.
  std::string text;
  for (int i = 0; i < 40; ++i) text += "hello world, the world in a line " + std::to_string(i) + "\n";
  std::ofstream(ref / "corpus.txt") << text;
  const std::string common = " --data " + (ref / "corpus.txt").string() + " --tokenizer gpt2 --tokenizer-dir " + good.string() +
                             " --n-layer 2 --n-head 4 --n-embd 32 --block-size 16 --batch-size 2 --steps 2 --threads 1"
                             " --warmup-steps 0 --eval-batches 1";
  r = testing::run_loom("train" + common + " --resume " + run.string() + " --out-dir " + (ref / "trained").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  // The same text as a token file (GPT-2's tokenizer, the converted files) resumes alike.
  const std::string tokens = (ref / "corpus.tok").string();
  r = testing::run_loom("tokenize --tokenizer gpt2 --tokenizer-dir " + good.string() + " " + (ref / "corpus.txt").string() +
                        " " + tokens);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string sizes = " --n-layer 2 --n-head 4 --n-embd 32 --block-size 16 --batch-size 2 --steps 2 --threads 1"
                            " --warmup-steps 0 --eval-batches 1";
  r = testing::run_loom("train --data " + tokens + sizes + " --resume " + run.string() + " --out-dir " +
                        (ref / "trained_tokens").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto losses = [](const fs::path& run_dir) {
    std::string out;
    std::ifstream in(run_dir / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json record = nlohmann::json::parse(line);
      if (record.value("kind", "") == "train") out += record.at("loss").dump() + " ";
    }
    return out;
  };
  EXPECT_FALSE(losses(ref / "trained").empty());
  EXPECT_EQ(losses(ref / "trained_tokens"), losses(ref / "trained"));
  // Its perplexity on the text.
  r = testing::run_loom("eval --checkpoint " + run.string() + " --data " + (ref / "corpus.txt").string() + " --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("nats/token"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bits/byte"), std::string::npos) << r.output;
  // The same figures from the token file of that text (its ids, its decoded bytes).
  const testing::CommandResult from_tokens =
      testing::run_loom("eval --checkpoint " + run.string() + " --data " + tokens + " --threads 1");
  ASSERT_EQ(from_tokens.exit_code, 0) << from_tokens.output;
  EXPECT_EQ(from_tokens.output.substr(from_tokens.output.find(": ")), r.output.substr(r.output.find(": ")));
  // A token file of another tokenizer's ids is refused by name.
  const std::string byte_tokens = (ref / "corpus.bytes.tok").string();
  ASSERT_EQ(testing::run_loom("tokenize --tokenizer byte " + (ref / "corpus.txt").string() + " " + byte_tokens).exit_code, 0);
  r = testing::run_loom("eval --checkpoint " + run.string() + " --data " + byte_tokens + " --threads 1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("was made with a byte tokenizer other than the checkpoint's gpt2 tokenizer"), std::string::npos)
      << r.output;
  // A batch whose KV cache does not fit in memory is refused before the prompts are read.
  r = testing::run_loom("sample --checkpoint " + run.string() + " --prompts-file " + (ref / "corpus.txt").string() +
                        " --batch 1000000000000 --threads 1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(" + KV cache "), std::string::npos) << r.output;
  // A tokenizer other than the checkpoint's is refused by name.
  r = testing::run_loom("train" + common + " --tokenizer byte --resume " + run.string() + " --out-dir " +
                        (ref / "other").string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("tokenizer gpt2 with 269 symbols"), std::string::npos) << r.output;
}

// A safetensors file as any writer lays it out: its header, and each tensor's bytes by name.
struct SafetensorsBytes {
  nlohmann::json header;
  std::string data;
  std::string data_of(const std::string& name) const {
    const auto offsets = header.at(name).at("data_offsets").get<std::vector<size_t>>();
    return data.substr(offsets[0], offsets[1] - offsets[0]);
  }
};
SafetensorsBytes safetensors_bytes(const fs::path& path) {
  const std::string bytes = testing::read_file(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  return {nlohmann::json::parse(bytes.substr(8, n)), bytes.substr(8 + n)};
}

// `loom convert --to-gpt2`: the inverse. GPT-2's reference checkpoint imported and exported again
// gives back its tensors bit for bit (the Conv1D weights transposed twice, the token table's
// padding rows dropped, the mask buffers it never held left out), the same sizes in config.json
// and a tokenizer that reads back the same; a model Loom trained (char tokenizer, 65 tokens, no
// GPT-2 tokenizer files) exported gives PyTorch's GPT-2 forward over the exported files the logits
// Loom's own forward gives (within 1e-5 absolute plus 1e-5 relative, both fp32). A mixture of
// experts and a directory holding files are refused by name.
TEST(Gpt2Export, ExportedCheckpointsAreGpt2sLayoutAndPyTorchsForwardAgrees) {
  const fs::path ref = make_reference("loom_gpt2_export");
  const fs::path good = ref / "good", loom_ckpt = ref / "imported.safetensors", out = ref / "exported";
  ASSERT_EQ(testing::run_loom("convert --from-gpt2 " + good.string() + " --to " + loom_ckpt.string()).exit_code, 0);
  testing::CommandResult r = testing::run_loom("convert --from " + loom_ckpt.string() + " --to-gpt2 " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("vocab.json, merges.txt"), std::string::npos) << r.output;
  const SafetensorsBytes original = safetensors_bytes(good / "model.safetensors");
  const SafetensorsBytes exported = safetensors_bytes(out / "model.safetensors");
  EXPECT_EQ(exported.header.at("__metadata__").at("format"), "pt");
  size_t compared = 0;
  for (const auto& [name, entry] : original.header.items()) {
    if (name == "__metadata__" || name.ends_with(".attn.bias")) continue;  // the causal-mask buffer, not a weight
    ASSERT_TRUE(exported.header.contains(name)) << name;
    EXPECT_EQ(exported.header.at(name).at("shape"), entry.at("shape")) << name;
    EXPECT_EQ(exported.header.at(name).at("dtype"), "F32") << name;
    EXPECT_EQ(exported.data_of(name), original.data_of(name)) << name;
    ++compared;
  }
  EXPECT_EQ(compared + 1, exported.header.size());  // and the metadata
  const nlohmann::json a = nlohmann::json::parse(testing::read_file(good / "config.json")),
                       b = nlohmann::json::parse(testing::read_file(out / "config.json"));
  for (const char* key : {"n_positions", "n_embd", "n_layer", "n_head", "vocab_size", "activation_function"})
    EXPECT_EQ(a.at(key), b.at(key)) << key;
  // Back into Loom: the same tensors and tokenizer as the first import.
  const Gpt2Checkpoint again = read_gpt2_checkpoint(out.string()), first = read_gpt2_checkpoint(good.string());
  EXPECT_EQ(again.info.tokenizer_spec, first.info.tokenizer_spec);
  for (const auto& [name, t] : first.tensors)
    EXPECT_EQ(std::memcmp(again.tensors.at(name).f32(), t.f32(), static_cast<size_t>(t.nbytes())), 0) << name;

  // A model Loom trained, against PyTorch's GPT-2 forward over its exported files.
  const fs::path run = ref / "trained", mine = ref / "mine";
  r = testing::run_loom("train --data " + std::string(LOOM_SOURCE_DIR) + "/data/tinyshakespeare.txt --n-layer 2 --n-head 4"
                        " --n-embd 32 --block-size 24 --batch-size 2 --steps 3 --threads 1 --eval-batches 1 --out-dir " +
                        run.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = testing::run_loom("convert --from " + run.string() + " --to-gpt2 " + mine.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("not GPT-2's BPE"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(mine / "vocab.json"));
  const CheckpointInfo info = read_checkpoint_info(resolve_checkpoint_path(run.string()));
  TrainConfig config;
  apply_toml_string(config, info.config_toml, "stored");
  config.model.vocab_size = data::Tokenizer::from_spec(info.tokenizer_spec)->vocab_size();
  nn::GPT model(config.model, 7);
  load_checkpoint(resolve_checkpoint_path(run.string()), model, nullptr, "");
  const std::vector<int32_t> tokens{18, 47, 56, 57, 58, 1, 15, 47, 58, 47, 64, 43, 52, 10, 0, 14, 43, 44, 53, 56};
  std::ofstream(ref / "tokens.json") << nlohmann::json(tokens).dump();
  const std::string cmd = std::string(LOOM_PYTHON) + " " + LOOM_SOURCE_DIR + "/tests/train/gpt2_checkpoint_reference.py --logits " +
                          mine.string() + " " + (ref / "tokens.json").string() + " " + (ref / "torch_logits.f32").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  expect_pytorchs_logits(model, tokens, ref / "torch_logits.f32");

  // Refused: a directory that holds files, and a mixture of experts.
  r = testing::run_loom("convert --from " + run.string() + " --to-gpt2 " + mine.string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("exists: export into a new or empty directory"), std::string::npos) << r.output;
  r = testing::run_loom("train --data " + std::string(LOOM_SOURCE_DIR) + "/data/tinyshakespeare.txt --n-layer 1 --n-head 2"
                        " --n-embd 16 --block-size 16 --batch-size 1 --steps 1 --threads 1 --eval-batches 1 --moe-experts 2"
                        " --out-dir " + (ref / "moe").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = testing::run_loom("convert --from " + (ref / "moe").string() + " --to-gpt2 " + (ref / "moe_gpt2").string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("is a mixture of 2 experts"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(ref / "moe_gpt2"));
}

}  // namespace
}  // namespace loom::train
