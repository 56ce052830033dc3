#include "loom/train/resume_auto.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "loom/agreed_error.hpp"
#include "loom/error.hpp"
#include "loom/train/checkpoint.hpp"
#include "loom/train/model_identity.hpp"
#include "loom/train/run_directory.hpp"

namespace loom::train {

namespace fs = std::filesystem;

namespace {

// Single files and sharded directories: the one `latest` names first (the last one this run
// directory's runs completed, which a run resumed from an earlier step makes older than the
// steps it abandoned), then the others newest first; "a b c".
std::vector<std::string> candidates_in(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {};
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string n = entry.path().filename().string();
    const int64_t step = checkpoint_step(n);
    const bool file = entry.is_regular_file() && entry.path().extension() == ".safetensors";
    if (step >= 0 && !n.ends_with(".tmp") && (file || entry.is_directory())) found.emplace_back(step, n);
  }
  std::sort(found.rbegin(), found.rend());
  const fs::path latest = fs::path(dir) / "latest";
  const std::string named = fs::is_symlink(latest, ec) ? fs::read_symlink(latest, ec).filename().string() : "";
  std::stable_partition(found.begin(), found.end(), [&](const auto& f) { return f.second == named; });
  std::vector<std::string> names;
  for (const auto& [step, n] : found) names.push_back(n);
  return names;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : " ") + n;
  return out;
}

}  // namespace

CheckpointVerdict judge_checkpoint(const std::string& path, const std::vector<StatePiece>& needed,
                                   const TrainConfig& config, const std::string& tokenizer_spec,
                                   const StateShapes& expected, const PaddedRows& padded) {
  try {
    CheckpointReader reader(path);  // the header or manifest, and the step against the name
    const CheckpointInfo& info = reader.info();
    const std::string misfit = different_model_message(path, info, config, tokenizer_spec);
    if (!misfit.empty()) return {misfit, ""};
    if (info.optimizer != config.optimizer)
      return {"checkpoint '" + path + "' was trained with optimizer '" + info.optimizer + "', this run uses '" +
                  config.optimizer + "'",
              ""};
    check(info.optimizer_steps >= 0, "checkpoint '", path, "' has no valid optimizer step count");
    check_checkpoint_fits(reader, needed, expected, padded);
    reader.verify_files();
    read_full_state(reader);  // every piece with its CRC-32
  } catch (const Error& e) {
    return {"", e.what()};
  }
  return {};
}

std::string choose_auto_resume(const std::vector<StatePiece>& needed, const TrainConfig& config,
                               const std::string& tokenizer_spec, comm::ProcessGroup& world, bool speak,
                               const StateShapes& expected, const PaddedRows& padded) {
  const std::string& dir = config.out_dir;
  // Every rank scans the (shared) run directory; they must all judge the same candidates.
  const std::vector<std::string> names = candidates_in(dir);
  const std::vector<std::string> lists = all_gather_strings(world, joined(names));
  for (size_t r = 1; r < lists.size(); ++r)
    check_agreed(lists[r] == lists[0], world.size(), "resume auto: rank 0 sees the checkpoints [", lists[0], "] in '", dir, "', rank ", r,
          " sees [", lists[r], "]; is out_dir on a file system all ranks share?");
  for (const std::string& name : names) {
    const std::string path = (fs::path(dir) / name).string();
    const CheckpointVerdict mine = judge_checkpoint(path, needed, config, tokenizer_spec, expected, padded);
    const std::vector<std::string> verdicts =
        all_gather_strings(world, nlohmann::json{{"misfit", mine.misfit}, {"damage", mine.damage}}.dump());
    std::string damage;
    for (size_t r = 0; r < verdicts.size(); ++r) {
      const nlohmann::json v = nlohmann::json::parse(verdicts[r]);
      const std::string rank = verdicts.size() > 1 ? "rank " + std::to_string(r) + ": " : "";
      check_agreed(v["misfit"].get<std::string>().empty(), world.size(), rank, v["misfit"].get<std::string>());
      if (damage.empty() && !v["damage"].get<std::string>().empty()) damage = rank + v["damage"].get<std::string>();
    }
    if (damage.empty()) return fs::canonical(path).string();
    if (speak) std::printf("resume auto: skipping %s: %s\n", name.c_str(), damage.c_str());
  }
  if (!speak) return "";
  // An attempt that died before its first checkpoint keeps its records: this run appends its
  // own after them, from a start record at step 0, and `loom report` draws this run's.
  const std::vector<std::string> previous = previous_run_files(dir);
  const bool logged = std::find(previous.begin(), previous.end(), "metrics.jsonl") != previous.end();
  std::printf("resume auto: no complete checkpoint in '%s', starting fresh%s\n", dir.c_str(),
              logged ? " at step 0 (metrics.jsonl keeps the steps an earlier attempt logged; loom report draws this "
                       "run's and counts those it leaves out)"
                     : "");
  return "";
}

}  // namespace loom::train
