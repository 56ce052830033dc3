#include "loom/train/gpt2_import.hpp"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "loom/data/gpt2_tokenizer.hpp"
#include "loom/data/input_file.hpp"
#include "loom/error.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/optim/adamw.hpp"
#include "loom/train/checkpoint.hpp"
#include "loom/train/memory_budget.hpp"

namespace loom::train {

namespace fs = std::filesystem;

namespace {

// The model sizes config.json gives, checked for what Loom's GPT computes.
nn::GPTConfig read_config_json(const std::string& path) {
  const int64_t bytes = data::check_input_file(path, "GPT-2 config", int64_t{1} << 20);
  std::ifstream in(path, std::ios::binary);
  std::string text(static_cast<size_t>(bytes), '\0');
  in.read(text.data(), bytes);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail("'", path, "' is not valid JSON: ", e.what());
  }
  check(j.is_object(), "'", path, "' must be a JSON object");
  auto size = [&](const char* key, const char* alias = nullptr) {
    const char* found = j.contains(key) ? key : (alias != nullptr && j.contains(alias) ? alias : nullptr);
    check(found != nullptr, "'", path, "' has no '", key, "'");
    const nlohmann::json& v = j.at(found);
    check(v.is_number_integer() && v.get<int64_t>() >= 1 && v.get<int64_t>() <= (int64_t{1} << 24), "'", path, "': '",
          found, "' must be a positive integer (at most 2^24), got ", v.dump());
    return v.get<int64_t>();
  };
  nn::GPTConfig m;
  m.block_size = size("n_positions", "n_ctx");
  m.n_embd = size("n_embd");
  m.n_layer = size("n_layer");
  m.n_head = size("n_head");
  m.vocab_size = size("vocab_size");
  m.padded_vocab_size = (m.vocab_size + 63) / 64 * 64;
  check(m.n_embd % m.n_head == 0, "'", path, "': n_embd (", m.n_embd, ") must be divisible by n_head (", m.n_head, ")");
  if (j.contains("layer_norm_epsilon")) {
    const nlohmann::json& eps = j.at("layer_norm_epsilon");
    check(eps.is_number() && std::fabs(eps.get<double>() - 1e-5) <= 1e-12, "'", path, "': layer_norm_epsilon is ",
          eps.dump(), "; Loom's LayerNorm computes with 1e-5 (GPT-2's value)");
  }
  if (j.contains("activation_function")) {
    const nlohmann::json& act = j.at("activation_function");
    check(act == "gelu_new" || act == "gelu_pytorch_tanh", "'", path, "': activation_function ", act.dump(),
          " is not GPT-2's tanh GELU ('gelu_new'), the one Loom computes");
  }
  if (j.contains("n_inner") && !j.at("n_inner").is_null())
    check(j.at("n_inner") == 4 * m.n_embd, "'", path, "': n_inner ", j.at("n_inner").dump(),
          " is not 4 x n_embd; Loom's MLP is 4 x wider than the model");
  return m;
}

// A safetensors file as any writer lays it out (tensors in any order, no Loom metadata):
// entries checked against the file's size before anything is read; F32, F16 and BF16 read as fp32.
class ForeignTensorFile {
 public:
  explicit ForeignTensorFile(const std::string& path) : path_(path), in_(path, std::ios::binary) {
    const auto file_size = static_cast<uint64_t>(data::check_input_file(path, "GPT-2 weights"));
    check(in_.good(), "cannot open '", path, "': ", std::strerror(errno));
    check(file_size >= 8, "'", path, "' is truncated (", file_size, " bytes)");
    unsigned char len[8];
    in_.read(reinterpret_cast<char*>(len), 8);
    uint64_t header_len = 0;
    for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(len[i]) << (8 * i);
    check(header_len <= (uint64_t{100} << 20) && 8 + header_len <= file_size, "'", path,
          "' is not a safetensors file or is truncated (header length ", header_len, ", file ", file_size, " bytes)");
    std::string text(header_len, '\0');
    in_.read(text.data(), static_cast<std::streamsize>(header_len));
    nlohmann::json header;
    try {
      header = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      fail("'", path, "' has a malformed safetensors header: ", e.what());
    }
    check(header.is_object(), "'", path, "' has a malformed safetensors header (not an object)");
    const uint64_t data_bytes = file_size - 8 - header_len;
    for (const auto& [name, v] : header.items()) {
      if (name == "__metadata__") continue;
      try {
        Entry e;
        e.shape = v.at("shape").get<Shape>();
        const std::string dtype = v.at("dtype").get<std::string>();
        check(dtype == "F32" || dtype == "F16" || dtype == "BF16", "'", path, "': tensor '", name, "' has dtype ", dtype,
              "; Loom reads F32, F16 and BF16");
        e.element_bytes = dtype == "F32" ? 4 : 2;
        e.dtype = dtype;
        const auto offsets = v.at("data_offsets").get<std::vector<uint64_t>>();
        check(offsets.size() == 2 && offsets[0] <= offsets[1] && offsets[1] <= data_bytes, "'", path, "': tensor '", name,
              "' has data offsets outside the file's ", data_bytes, " data bytes");
        uint64_t bytes = e.element_bytes;
        for (int64_t d : e.shape) {
          check(d >= 0 && static_cast<uint64_t>(d) <= data_bytes, "'", path, "': tensor '", name, "' has an invalid shape");
          bytes *= static_cast<uint64_t>(d);
          check(bytes <= data_bytes || d == 0, "'", path, "': tensor '", name, "' is larger than the file");
        }
        check(bytes == offsets[1] - offsets[0], "'", path, "': tensor '", name, "' of shape ", shape_str(e.shape),
              " does not match its ", offsets[1] - offsets[0], " bytes");
        e.offset = 8 + header_len + offsets[0];
        entries_.emplace(name, e);
      } catch (const nlohmann::json::exception& ex) {
        fail("'", path, "': malformed entry for tensor '", name, "': ", ex.what());
      }
    }
  }

  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  std::set<std::string> names() const {
    std::set<std::string> out;
    for (const auto& [n, e] : entries_) out.insert(n);
    return out;
  }

  // The tensor `name` as fp32, which must have shape `want`.
  Tensor read(const std::string& name, const Shape& want) {
    auto it = entries_.find(name);
    check(it != entries_.end(), "'", path_, "' has no tensor '", name, "' (GPT-2's layout has one for these sizes)");
    const Entry& e = it->second;
    check(e.shape == want, "'", path_, "': tensor '", name, "' is ", shape_str(e.shape), ", config.json's sizes need ",
          shape_str(want));
    Tensor t = Tensor::empty(want);
    const int64_t n = t.numel();
    in_.clear();
    in_.seekg(static_cast<std::streamoff>(e.offset));
    if (e.element_bytes == 4) {
      in_.read(reinterpret_cast<char*>(t.f32()), n * 4);
    } else {
      std::vector<uint16_t> half(static_cast<size_t>(n));
      in_.read(reinterpret_cast<char*>(half.data()), n * 2);
      for (int64_t i = 0; i < n; ++i) t.f32()[i] = e.dtype == "BF16" ? bf16_to_float(half[i]) : f16_to_float(half[i]);
    }
    check(in_.good(), "'", path_, "' is truncated inside tensor '", name, "'");
    return t;
  }

 private:
  static float bf16_to_float(uint16_t h) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  static float f16_to_float(uint16_t h) {
    const int exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
    const float sign = (h & 0x8000) ? -1.0f : 1.0f;
    if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -24);
    if (exponent == 31) return mantissa ? NAN : sign * INFINITY;
    return sign * std::ldexp(static_cast<float>(mantissa + 1024), exponent - 25);
  }

  struct Entry {
    Shape shape;
    std::string dtype;
    uint64_t element_bytes = 4, offset = 0;
  };
  std::string path_;
  std::ifstream in_;
  std::map<std::string, Entry> entries_;
};

// dst (out, in) = src (in, out) transposed: a Conv1D weight as a Linear one.
void copy_transposed(const Tensor& src, Tensor& dst) {
  const int64_t rows = src.size(0), cols = src.size(1);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst.f32()[c * rows + r] = src.f32()[r * cols + c];
}

}  // namespace

Gpt2Checkpoint read_gpt2_checkpoint(const std::string& dir) {
  check(fs::is_directory(dir), "GPT-2 checkpoint directory '", dir, "' ", fs::exists(dir) ? "is not a directory" : "does not exist",
        " (it holds config.json, model.safetensors, vocab.json and merges.txt)");
  const std::string abs_dir = fs::absolute(dir).lexically_normal().string();
  Gpt2Checkpoint out;
  TrainConfig& c = out.config;
  c.model = read_config_json(abs_dir + "/config.json");
  c.tokenizer = "gpt2";
  c.tokenizer_dir = abs_dir;
  const data::Gpt2Tokenizer tokenizer = data::Gpt2Tokenizer::from_files(abs_dir);
  check(tokenizer.vocab_size() == c.model.vocab_size, "'", abs_dir, "/config.json' says vocab_size ", c.model.vocab_size,
        ", its vocab.json has ", tokenizer.vocab_size(), " tokens");
  c.model.validate();
  check_fits_in_memory(inference_memory(c.model), 1, "the GPT-2 model of '" + abs_dir + "'",
                       {"loom convert --from-gpt2", ""});

  const int64_t C = c.model.n_embd, V = c.model.vocab_size;
  nn::GPT model(c.model, 0);
  optim::AdamW adamw(model.parameters(), optim::AdamWConfig{});
  out.tensors = checkpoint_tensors(model, &adamw);
  ForeignTensorFile file(abs_dir + "/model.safetensors");
  const std::string prefix = file.contains("wte.weight") || !file.contains("transformer.wte.weight") ? "" : "transformer.";
  std::set<std::string> used;
  auto dest = [&](const std::string& name) -> Tensor& {
    auto it = out.tensors.find("model." + name);
    check(it != out.tensors.end(), "internal: Loom's model has no parameter '", name, "'");
    return it->second;
  };
  auto read = [&](const std::string& name, const Shape& shape) {
    used.insert(prefix + name);
    return file.read(prefix + name, shape);
  };
  auto copy = [&](const std::string& from, const std::string& to) {
    Tensor& d = dest(to);
    const Tensor s = read(from, d.shape());
    std::memcpy(d.f32(), s.f32(), static_cast<size_t>(d.nbytes()));
  };
  auto conv1d = [&](const std::string& from, const std::string& to) {
    Tensor& d = dest(to);
    copy_transposed(read(from, {d.size(1), d.size(0)}), d);
  };
  {
    Tensor& wte = dest("embedding.wte");  // (Vp, C): GPT-2's rows, then zero padding
    wte.zero_();
    const Tensor s = read("wte.weight", {V, C});
    std::memcpy(wte.f32(), s.f32(), static_cast<size_t>(s.nbytes()));
  }
  copy("wpe.weight", "embedding.wpe");
  for (int64_t l = 0; l < c.model.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".", b = "blocks." + std::to_string(l) + ".";
    for (const auto& [gpt2, loom] : {std::pair{"ln_1", "ln1"}, std::pair{"ln_2", "ln2"}}) {
      copy(h + gpt2 + ".weight", b + loom + ".weight");
      copy(h + gpt2 + ".bias", b + loom + ".bias");
    }
    for (const auto& [gpt2, loom] : {std::pair{"attn.c_attn", "attn.qkv"}, std::pair{"attn.c_proj", "attn.proj"},
                                     std::pair{"mlp.c_fc", "mlp.fc"}, std::pair{"mlp.c_proj", "mlp.proj"}}) {
      conv1d(h + gpt2 + ".weight", b + loom + ".weight");
      copy(h + gpt2 + ".bias", b + loom + ".bias");
    }
  }
  copy("ln_f.weight", "ln_f.weight");
  copy("ln_f.bias", "ln_f.bias");
  for (const std::string& name : file.names()) {
    // The causal-mask buffers older files carry and the LM head (tied to wte) are not weights to read.
    const bool buffer = name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") || name == "lm_head.weight";
    check(used.count(name) != 0 || buffer, "'", abs_dir, "/model.safetensors' has tensor '", name,
          "', which GPT-2's layout for n_layer ", c.model.n_layer, " does not: is this a GPT-2 checkpoint?");
  }
  for (auto& [name, t] : out.tensors)
    if (name.rfind("optim.", 0) == 0) t.zero_();
  out.info.step = 0;
  out.info.config_toml = to_toml(c);
  out.info.tokenizer_spec = tokenizer.spec();
  out.info.optimizer = "adamw";
  out.info.optimizer_steps = 0;
  return out;
}

std::string convert_gpt2_checkpoint(const std::string& dir, const std::string& to) {
  check(to.ends_with(".safetensors") || !fs::exists(to) || (fs::is_directory(to) && fs::is_empty(to)), "'", to,
        "' exists: convert into a new or empty run directory (or name a FILE.safetensors)");
  const Gpt2Checkpoint ckpt = read_gpt2_checkpoint(dir);
  if (to.ends_with(".safetensors")) {
    write_checkpoint_file(to, ckpt.tensors, ckpt.info);
    return to;
  }
  return save_checkpoint(to, ckpt.tensors, ckpt.info, /*keep=*/1);
}

}  // namespace loom::train
