#include "loom/train/gpt2_export.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>

#include "loom/data/output_file.hpp"
#include "loom/error.hpp"
#include "loom/train/inference_model.hpp"
#include "loom/train/safetensors.hpp"

namespace loom::train {

namespace fs = std::filesystem;

namespace {

// (in, out) = w (out, in) transposed: a Linear weight as GPT-2's Conv1D stores it.
Tensor transposed(const Tensor& w) {
  const int64_t out = w.size(0), in = w.size(1);
  Tensor t = Tensor::empty({in, out}, DType::F32, MemoryCategory::Other);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) t.f32()[i * out + o] = w.f32()[o * in + i];
  return t;
}

// GPT2LMHeadModel's configuration for these sizes: Loom's GPT is GPT-2's architecture (pre-LN
// blocks, tanh GELU, an MLP 4x wide, LayerNorm epsilon 1e-5, the head tied to wte), its
// dropouts training-time only.
nlohmann::json gpt2_config(const nn::GPTConfig& m, int64_t vocab) {
  return {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"}, {"vocab_size", vocab},
          {"n_positions", m.block_size}, {"n_ctx", m.block_size}, {"n_embd", m.n_embd}, {"n_layer", m.n_layer},
          {"n_head", m.n_head}, {"n_inner", nullptr}, {"activation_function", "gelu_new"},
          {"layer_norm_epsilon", 1e-5}, {"resid_pdrop", 0.0}, {"embd_pdrop", 0.0}, {"attn_pdrop", 0.0},
          {"tie_word_embeddings", true}, {"initializer_range", 0.02}};
}

// A GPT-2 tokenizer's vocab.json ({token: id}) and merges.txt (the header GPT-2's files carry,
// then one merge a line) from its spec ("gpt2:" + {"merges": [...], "vocab": [...]}).
void write_gpt2_tokenizer(const std::string& spec, const std::string& dir) {
  const nlohmann::json body = nlohmann::json::parse(spec.substr(5));
  nlohmann::json vocab = nlohmann::json::object();
  const std::vector<std::string> tokens = body.at("vocab").get<std::vector<std::string>>();
  for (size_t id = 0; id < tokens.size(); ++id) vocab[tokens[id]] = id;
  std::string merges = "#version: 0.2\n";
  for (const std::string& m : body.at("merges").get<std::vector<std::string>>()) merges += m + "\n";
  data::write_file_atomically(dir + "/vocab.json", vocab.dump());
  data::write_file_atomically(dir + "/merges.txt", merges);
}

}  // namespace

std::string export_gpt2_checkpoint(const std::string& checkpoint, const std::string& dir) {
  check(!fs::exists(dir) || (fs::is_directory(dir) && fs::is_empty(dir)), "'", dir,
        "' exists: export into a new or empty directory");
  const InferenceModel loaded = load_inference_model(checkpoint, nullptr, 1, {"loom convert --to-gpt2", ""});
  const TrainConfig& c = loaded.config;
  check(c.family == "gpt", "GPT-2's layout holds a GPT; '", checkpoint, "' is a ", c.family, " model");
  check(!c.model.moe.enabled(), "GPT-2's layout has one MLP a block; '", checkpoint, "' is a mixture of ",
        c.model.moe.experts, " experts (moe_experts)");
  const nn::GPTConfig& m = c.model;
  const int64_t V = loaded.tokenizer->vocab_size(), C = m.n_embd;
  std::map<std::string, const Tensor*> loom;
  for (nn::Parameter* p : loaded.model->parameters()) loom.emplace(p->name(), &p->value());
  auto value = [&](const std::string& name) -> const Tensor& {
    auto it = loom.find(name);
    check(it != loom.end(), "internal: the model has no parameter '", name, "'");
    return *it->second;
  };
  TensorFile out;
  out.metadata["format"] = "pt";  // Hugging Face's loader refuses a file without it
  out.tensors["wte.weight"] = value("embedding.wte").narrow(0, V);  // (V, C): its padding rows dropped
  out.tensors["wpe.weight"] = value("embedding.wpe");
  for (int64_t l = 0; l < m.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".", b = "blocks." + std::to_string(l) + ".";
    for (const auto& [gpt2, name] : {std::pair{"ln_1", "ln1"}, std::pair{"ln_2", "ln2"}}) {
      out.tensors[h + gpt2 + ".weight"] = value(b + name + ".weight");
      out.tensors[h + gpt2 + ".bias"] = value(b + name + ".bias");
    }
    for (const auto& [gpt2, name] : {std::pair{"attn.c_attn", "attn.qkv"}, std::pair{"attn.c_proj", "attn.proj"},
                                     std::pair{"mlp.c_fc", "mlp.fc"}, std::pair{"mlp.c_proj", "mlp.proj"}}) {
      out.tensors[h + gpt2 + ".weight"] = transposed(value(b + name + ".weight"));
      out.tensors[h + gpt2 + ".bias"] = value(b + name + ".bias");
    }
  }
  out.tensors["ln_f.weight"] = value("ln_f.weight");
  out.tensors["ln_f.bias"] = value("ln_f.bias");
  check(out.tensors.size() == loom.size(), "internal: ", loom.size(), " parameters, ", out.tensors.size(),
        " GPT-2 tensors written");

  fs::create_directories(dir);
  save_tensor_file(dir + "/model.safetensors", out);
  data::write_file_atomically(dir + "/config.json", gpt2_config(m, V).dump(2) + "\n");
  const std::string spec = loaded.tokenizer->spec();
  const bool gpt2_tokens = spec.rfind("gpt2:", 0) == 0;
  if (gpt2_tokens) write_gpt2_tokenizer(spec, dir);
  return "wrote " + dir + " (config.json, model.safetensors" + (gpt2_tokens ? ", vocab.json, merges.txt" : "") +
         ") from " + checkpoint + ": " + std::to_string(m.n_layer) + " layers of width " + std::to_string(C) + ", " +
         std::to_string(V) + " tokens" +
         (gpt2_tokens ? "" : "; its tokenizer is Loom's '" + spec.substr(0, spec.find(':')) +
                                 "' one, not GPT-2's BPE: no tokenizer files (token ids as Loom's tokenizer gives them)");
}

}  // namespace loom::train
