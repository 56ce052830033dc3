#include "loom/train/rank_agreement.hpp"

#include <algorithm>
#include <map>
#include <sstream>

#include "loom/comm/byte_transport.hpp"
#include "loom/error.hpp"

#ifndef LOOM_BUILD_ID
#define LOOM_BUILD_ID "unknown"
#endif

namespace loom::train {

namespace {

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

// key -> value, in the order of the text (keys are unique across sections).
std::vector<std::pair<std::string, std::string>> entries(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find(" = ");
    if (!line.starts_with("[") && eq != std::string::npos) out.emplace_back(line.substr(0, eq), line.substr(eq + 3));
  }
  return out;
}

// "rank 3 has", "ranks 0-2 and 5 have".
std::string ranks_have(const std::vector<int>& ranks) {
  std::vector<std::string> runs;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    std::string run = std::to_string(ranks[i]);
    if (j > i) run += '-' + std::to_string(ranks[j]);
    runs.push_back(run);
    i = j + 1;
  }
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < runs.size(); ++i) text += (i == 0 ? "" : i + 1 == runs.size() ? " and " : ", ") + runs[i];
  return text + (ranks.size() == 1 ? " has" : " have");
}

}  // namespace

const std::string& build_id() {
  static const std::string id = LOOM_BUILD_ID;
  return id;
}

std::string agreement_text(const TrainConfig& config) {
  TrainConfig resolved = config;
  return to_toml(resolved) + "\n[resolved]\nvocab_size = " + std::to_string(config.model.vocab_size) +
         "\nbuild = \"" + build_id() + "\"\n";
}

std::vector<std::string> disagreements(const std::vector<std::string>& texts) {
  std::vector<std::map<std::string, std::string>> values;
  std::vector<std::string> keys;  // in the order of the texts, each once
  for (const std::string& text : texts) {
    values.emplace_back();
    for (auto& [key, value] : entries(text)) {
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
      values.back()[key] = value;
    }
  }
  std::vector<std::string> out;
  for (const std::string& key : keys) {
    std::vector<std::pair<std::string, std::vector<int>>> by_value;  // in order of first rank
    for (int q = 0; q < static_cast<int>(values.size()); ++q) {
      const auto it = values[q].find(key);
      const std::string value = it == values[q].end() ? "(missing)" : it->second;
      auto group = std::find_if(by_value.begin(), by_value.end(), [&](const auto& g) { return g.first == value; });
      if (group == by_value.end()) by_value.push_back({value, {q}});
      else group->second.push_back(q);
    }
    if (by_value.size() < 2) continue;
    std::ostringstream os;
    for (size_t i = 0; i < by_value.size(); ++i)
      os << (i ? ", " : "") << ranks_have(by_value[i].second) << " " << key << " = " << by_value[i].first;
    out.push_back(os.str());
  }
  return out;
}

void check_ranks_agree(const TrainConfig& config, comm::ProcessGroup& world) {
  const std::string mine = agreement_text(config);
  const std::vector<uint64_t> digests = comm::all_gather_value(world, fnv1a(mine));
  if (std::all_of(digests.begin(), digests.end(), [&](uint64_t d) { return d == digests.front(); })) return;
  const std::vector<std::string> differences = disagreements(comm::all_gather_bytes(world, mine));
  std::ostringstream os;
  os << "ranks disagree on the configuration:";
  const size_t shown = std::min<size_t>(differences.size(), 8);
  for (size_t i = 0; i < shown; ++i) os << (i ? ";" : "") << " " << differences[i];
  if (differences.size() > shown) os << "; and " << differences.size() - shown << " more";
  os << "; start every rank with the same configuration and the same loom binary";
  throw Error(os.str());
}

}  // namespace loom::train
