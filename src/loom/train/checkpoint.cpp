#include "loom/train/checkpoint.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <filesystem>

#include "loom/data/input_file.hpp"
#include "loom/data/output_file.hpp"
#include "loom/error.hpp"
#include "loom/train/safetensors.hpp"
#include "loom/train/sharded_checkpoint.hpp"

namespace loom::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kKind = "loom-checkpoint";

std::string checkpoint_name(int64_t step) { return checkpoint_dir_name(step) + ".safetensors"; }


// Whole tensors of the serial layout as load destinations.
std::vector<StatePiece> whole_pieces(const std::map<std::string, Tensor>& tensors) {
  std::vector<StatePiece> out;
  for (const auto& [name, t] : tensors) out.push_back({name, t.shape(), whole_piece(t.shape()), t, true});
  return out;
}

}  // namespace

// The step of a run directory entry "checkpoint-<step>[.safetensors|.tmp]", or -1.
int64_t checkpoint_step(const std::string& entry) {
  if (entry.rfind("checkpoint-", 0) != 0) return -1;
  const std::string digits = entry.substr(11, entry.find('.') == std::string::npos ? std::string::npos : entry.find('.') - 11);
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit) || digits.size() > 18) return -1;
  return std::stoll(digits);
}

CheckpointInfo checkpoint_info_from(const std::map<std::string, std::string>& metadata, const std::string& path) {
  auto get = [&](const std::string& key) {
    auto it = metadata.find(key);
    check(it != metadata.end(), "'", path, "' is not a Loom checkpoint (no '", key, "')");
    return it->second;
  };
  check(get("loom.kind") == kKind, "'", path, "' is not a Loom checkpoint");
  // Step counts as the writer stores them: decimal integers >= 0 (the CRC covers only the
  // data, so "-5" or "7abc" would otherwise resume at a step no run reached).
  auto count = [&](const std::string& key, const std::string& text) {
    int64_t v = -1;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    check(ec == std::errc() && end == text.data() + text.size() && v >= 0, "'", path, "': invalid ", key, " '", text,
          "' (a count of steps, an integer >= 0)");
    return v;
  };
  CheckpointInfo info;
  info.step = count("step", get("step"));
  if (metadata.count("optimizer_steps")) info.optimizer_steps = count("optimizer_steps", metadata.at("optimizer_steps"));
  info.config_toml = get("config");
  info.tokenizer_spec = get("tokenizer");
  info.optimizer = get("optimizer");
  return info;
}

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

namespace {

TensorFile checkpoint_file(const std::map<std::string, Tensor>& tensors, const CheckpointInfo& info) {
  TensorFile f;
  for (const auto& [name, t] : tensors) f.tensors.emplace(name, t);
  if (info.optimizer_steps >= 0) f.metadata["optimizer_steps"] = std::to_string(info.optimizer_steps);
  f.metadata["loom.kind"] = kKind;
  f.metadata["step"] = std::to_string(info.step);
  f.metadata["config"] = info.config_toml;
  f.metadata["tokenizer"] = info.tokenizer_spec;
  f.metadata["optimizer"] = info.optimizer;
  return f;
}

}  // namespace

TensorFileParts lay_out_checkpoint_file(const std::map<std::string, Tensor>& tensors, const CheckpointInfo& info) {
  return lay_out_tensor_file(checkpoint_file(tensors, info));
}

void encode_checkpoint_file_into(const std::map<std::string, Tensor>& tensors, const CheckpointInfo& info,
                                 std::string& bytes) {
  lay_out_checkpoint_file(tensors, info).copy_into(bytes);
}

void write_checkpoint_file(const std::string& path, const std::map<std::string, Tensor>& tensors,
                           const CheckpointInfo& info) {
  write_file_atomically(path, lay_out_checkpoint_file(tensors, info).views());
}

std::string save_checkpoint(const std::string& dir, const std::map<std::string, Tensor>& tensors,
                            const CheckpointInfo& info, int64_t keep) {
  return save_encoded_checkpoint(dir, lay_out_checkpoint_file(tensors, info).views(), info.step, keep);
}

std::string save_encoded_checkpoint(const std::string& dir, const std::vector<std::string_view>& parts, int64_t step,
                                    int64_t keep) {
  fs::create_directories(dir);
  const std::string name = checkpoint_name(step);
  const std::string path = (fs::path(dir) / name).string();
  write_file_atomically(path, parts);
  publish_checkpoint(dir, name, keep);
  return path;
}

std::string checkpoint_dir_name(int64_t step) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "checkpoint-%08lld", static_cast<long long>(step));
  return buf;
}

bool is_complete_checkpoint(const std::string& path) {
  if (fs::is_directory(path)) return fs::exists(fs::path(path) / kManifestName);
  return fs::is_regular_file(path);
}

void publish_checkpoint(const std::string& run_dir, const std::string& name, int64_t keep) {
  // Point `latest` at the complete checkpoint: a new symlink renamed over the old one is atomic.
  const fs::path latest = fs::path(run_dir) / "latest";
  const fs::path tmp_link = fs::path(run_dir) / ".latest.tmp";
  fs::remove(tmp_link);
  fs::create_symlink(name, tmp_link);
  fs::rename(tmp_link, latest);

  // Only now may older ones go: the `keep` most recently completed checkpoints stay (by when
  // they were written, not by step: a run resumed from an earlier step keeps its own over the
  // later steps it abandoned), and partial ones (a writer that died) older than the new one
  // are removed, with the temporary files of single-file saves that never completed (the run
  // holds the directory's lock: no other writer is saving).
  std::vector<std::pair<fs::file_time_type, std::string>> complete;
  for (const auto& entry : fs::directory_iterator(run_dir)) {
    const std::string n = entry.path().filename().string();
    if (n.starts_with(".checkpoint-") && n.find(".tmp.") != std::string::npos) {
      fs::remove(entry.path());
      continue;
    }
    const int64_t step = checkpoint_step(n);
    if (step < 0 || n == name) continue;
    const bool partial = n.ends_with(".tmp") || !is_complete_checkpoint(entry.path().string());
    if (partial && step < checkpoint_step(name))
      fs::remove_all(entry.path());
    else if (!partial && (n.ends_with(".safetensors") || entry.is_directory()))
      complete.emplace_back(fs::last_write_time(entry.is_directory() ? entry.path() / kManifestName : entry.path()), n);
  }
  std::sort(complete.begin(), complete.end());
  // The new checkpoint counts as one of the `keep`.
  for (size_t i = 0; i + static_cast<size_t>(keep) < complete.size() + 1; ++i) fs::remove_all(fs::path(run_dir) / complete[i].second);
}

std::string resolve_checkpoint_path(const std::string& path_or_dir) {
  fs::path p(path_or_dir);
  const std::string kind = data::file_kind(p.string());
  check(kind != "missing", "no checkpoint at '", p.string(), "'");
  check(kind == "a regular file" || kind == "a directory", "checkpoint '", p.string(), "' is ", kind,
        ", not a checkpoint file or directory");
  // A `latest` that never resolves (a link to itself) is damage to name, not to step around.
  check(data::file_kind((p / "latest").string()) != "a symbolic link loop", "'", (p / "latest").string(),
        "' is a symbolic link loop (it points at itself); delete it, then resume from the run directory or a "
        "checkpoint by name");
  // A file of a sharded checkpoint (its manifest, a rank's file) is no checkpoint itself: its
  // directory is.
  const fs::path holder = fs::absolute(p).parent_path();
  check(fs::is_directory(p) || !fs::exists(holder / kManifestName), "'", p.string(),
        "' is a file of the sharded checkpoint '", holder.string(), "': give that directory");
  const bool run_dir = fs::is_directory(p) && !fs::exists(p / kManifestName) && checkpoint_step(p.filename().string()) < 0;
  if (!run_dir) {
    check(fs::exists(p), "no checkpoint at '", p.string(), "'");
    return fs::canonical(p).string();
  }
  if (fs::exists(p / "latest") && is_complete_checkpoint((p / "latest").string())) return fs::canonical(p / "latest").string();
  // `latest` is missing or names a checkpoint whose manifest never appeared (its writer
  // crashed): the newest complete checkpoint is the one to continue from.
  std::string best;
  int64_t best_step = -1;
  for (const auto& entry : fs::directory_iterator(p)) {
    const std::string n = entry.path().filename().string();
    const int64_t step = checkpoint_step(n);
    if (step > best_step && !n.ends_with(".tmp") && is_complete_checkpoint(entry.path().string())) {
      best_step = step;
      best = entry.path().string();
    }
  }
  check(best_step >= 0, "no complete checkpoint in '", p.string(), "'");
  return fs::canonical(best).string();
}

CheckpointInfo read_checkpoint_info(const std::string& path) {
  if (fs::is_directory(path)) return read_manifest(path).info;
  return checkpoint_info_from(TensorFileReader(path).metadata(), path);  // the data stays unread
}

CheckpointInfo load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer* optimizer,
                               const std::string& optimizer_name) {
  CheckpointInfo info = load_checkpoint(path, checkpoint_tensors(model, optimizer), optimizer_name);
  if (optimizer != nullptr) optimizer->set_steps_taken(info.optimizer_steps);
  return info;
}

CheckpointInfo load_checkpoint(const std::string& path, const std::map<std::string, Tensor>& destinations,
                               const std::string& optimizer_name) {
  return load_state(path, whole_pieces(destinations), optimizer_name);
}

}  // namespace loom::train
