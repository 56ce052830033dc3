#include "loom/train/checkpoint.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "loom/error.hpp"
#include "loom/train/safetensors.hpp"

namespace loom::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kKind = "loom-checkpoint";

std::string checkpoint_name(int64_t step) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "checkpoint-%08lld.safetensors", static_cast<long long>(step));
  return buf;
}

CheckpointInfo info_from(const TensorFile& f, const std::string& path) {
  auto get = [&](const std::string& key) {
    auto it = f.metadata.find(key);
    check(it != f.metadata.end(), "'", path, "' is not a Loom checkpoint (no '", key, "')");
    return it->second;
  };
  check(get("loom.kind") == kKind, "'", path, "' is not a Loom checkpoint");
  CheckpointInfo info;
  try {
    info.step = std::stoll(get("step"));
  } catch (const std::logic_error&) {
    fail("'", path, "' has an invalid step '", get("step"), "'");
  }
  info.config_toml = get("config");
  info.tokenizer_spec = get("tokenizer");
  info.optimizer = get("optimizer");
  return info;
}

void copy_into(Tensor& dst, const TensorFile& f, const std::string& name, const std::string& path) {
  auto it = f.tensors.find(name);
  check(it != f.tensors.end(), "checkpoint '", path, "' has no tensor '", name, "'");
  check(it->second.shape() == dst.shape() && it->second.dtype() == dst.dtype(), "checkpoint '", path, "': tensor '",
        name, "' is ", shape_str(it->second.shape()), ", the model expects ", shape_str(dst.shape()));
  dst.copy_from(it->second);
}

}  // namespace

std::map<std::string, Tensor> checkpoint_tensors(nn::Module& model, optim::Optimizer* optimizer) {
  std::map<std::string, Tensor> out;
  for (nn::Parameter* p : model.parameters()) out.emplace("model." + p->name(), p->value());
  if (optimizer != nullptr)
    for (auto& [name, t] : optimizer->state()) out.emplace("optim." + name, t);
  return out;
}

std::string save_checkpoint(const std::string& dir, nn::Module& model, optim::Optimizer* optimizer,
                            const std::string& optimizer_name, const CheckpointInfo& info, int64_t keep) {
  CheckpointInfo with_optimizer = info;
  with_optimizer.optimizer = optimizer_name;
  with_optimizer.optimizer_steps = optimizer != nullptr ? optimizer->steps_taken() : -1;
  return save_checkpoint(dir, checkpoint_tensors(model, optimizer), with_optimizer, keep);
}

std::string save_checkpoint(const std::string& dir, const std::map<std::string, Tensor>& tensors,
                            const CheckpointInfo& info, int64_t keep) {
  fs::create_directories(dir);
  TensorFile f;
  for (const auto& [name, t] : tensors) f.tensors.emplace(name, t);
  if (info.optimizer_steps >= 0) f.metadata["optimizer_steps"] = std::to_string(info.optimizer_steps);
  f.metadata["loom.kind"] = kKind;
  f.metadata["step"] = std::to_string(info.step);
  f.metadata["config"] = info.config_toml;
  f.metadata["tokenizer"] = info.tokenizer_spec;
  f.metadata["optimizer"] = info.optimizer;
  const std::string name = checkpoint_name(info.step);
  const std::string path = (fs::path(dir) / name).string();
  save_tensor_file(path, f);

  // Point `latest` at the complete file: a new symlink renamed over the old one is atomic.
  const fs::path latest = fs::path(dir) / "latest";
  const fs::path tmp_link = fs::path(dir) / ".latest.tmp";
  fs::remove(tmp_link);
  fs::create_symlink(name, tmp_link);
  fs::rename(tmp_link, latest);

  std::vector<std::string> existing;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string n = entry.path().filename().string();
    if (n.rfind("checkpoint-", 0) == 0 && n.size() > 12 && entry.path().extension() == ".safetensors")
      existing.push_back(n);
  }
  std::sort(existing.begin(), existing.end());
  for (size_t i = 0; i + static_cast<size_t>(keep) < existing.size(); ++i)
    if (existing[i] != name) fs::remove(fs::path(dir) / existing[i]);
  return path;
}

std::string resolve_checkpoint_path(const std::string& path_or_dir) {
  fs::path p(path_or_dir);
  if (fs::is_directory(p)) p /= "latest";
  check(fs::exists(p), "no checkpoint at '", p.string(), "'");
  return fs::canonical(p).string();
}

CheckpointInfo read_checkpoint_info(const std::string& path) {
  TensorFile f = load_tensor_file(path);
  return info_from(f, path);
}

CheckpointInfo load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer* optimizer,
                               const std::string& optimizer_name) {
  CheckpointInfo info = load_checkpoint(path, checkpoint_tensors(model, optimizer), optimizer_name);
  if (optimizer != nullptr) optimizer->set_steps_taken(info.optimizer_steps);
  return info;
}

CheckpointInfo load_checkpoint(const std::string& path, const std::map<std::string, Tensor>& destinations,
                               const std::string& optimizer_name) {
  TensorFile f = load_tensor_file(path);
  CheckpointInfo info = info_from(f, path);
  bool wants_optimizer = false;
  for (const auto& [name, t] : destinations) wants_optimizer |= name.rfind("optim.", 0) == 0;
  if (wants_optimizer) {
    check(info.optimizer == optimizer_name, "checkpoint '", path, "' was trained with optimizer '", info.optimizer,
          "', this run uses '", optimizer_name, "'");
    try {
      info.optimizer_steps = std::stoll(f.metadata.at("optimizer_steps"));
    } catch (const std::exception&) {
      fail("checkpoint '", path, "' has no valid optimizer step count");
    }
  }
  for (const auto& [name, t] : destinations) {
    Tensor dst = t;  // a view: loading writes the caller's storage
    copy_into(dst, f, name, path);
  }
  return info;
}

}  // namespace loom::train
