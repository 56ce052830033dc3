#include "loom/report/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <utility>

#include "loom/data/input_file.hpp"
#include "loom/error.hpp"

namespace loom::report {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;


// A record as the sections read it: an object whose plotted fields have the types the
// trainer writes, so a hand-edited or damaged line is named here rather than failing inside
// a chart. A loss may be null: a non-finite loss (on_nan = "skip") is written as null.
void check_metrics_record(const json& r, const std::string& path, int64_t line) {
  const std::string where = path + " line " + std::to_string(line);
  check(r.is_object(), where, ": expected a JSON object, got ", describe(r));
  auto typed = [&](const std::string& key, const json& value, bool ok, const char* what) {
    check(ok, where, ": field '", brief(key, 64), "' must be ", what, ", got ", describe(value));
  };
  if (r.contains("kind")) typed("kind", r["kind"], r["kind"].is_string(), "a string");
  const std::string kind = r.value("kind", "");
  if (kind == "train" || kind == "val" || kind == "start") {
    check(r.contains("step"), where, ": a ", kind, " record without a 'step'");
    typed("step", r["step"], r["step"].is_number(), "a number");
  }
  for (const auto& [key, value] : r.items()) {
    if (key == "loss" || key.ends_with("_loss"))
      typed(key, value, value.is_number() || value.is_null(), "a number (or null)");
    else if (key == "tokens_per_s" || key == "mfu" || key == "comm_s" || key == "comm_exposed_s" ||
             key == "moe_load_imbalance")
      typed(key, value, value.is_number(), "a number");
  }
  if (r.contains("moe_load")) {
    const json& load = r["moe_load"];
    typed("moe_load", load, load.is_array() && std::all_of(load.begin(), load.end(), [](const json& x) { return x.is_number(); }),
          "an array of numbers");
  }
}

double number_or(const json& r, const char* key, double absent) {
  const auto it = r.find(key);
  return it != r.end() && it->is_number() ? it->get<double>() : absent;
}

// v as a float; a damaged record's value beyond float's range (negative loads) saturates,
// where converting it would be undefined.
float to_float(double v) {
  constexpr double kMax = std::numeric_limits<float>::max();
  return static_cast<float>(std::clamp(v, -kMax, kMax));
}

}  // namespace

std::string brief(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  return text.substr(0, cut) + "...";
}

std::string describe(const json& value) {
  if (value.is_object()) return "an object";
  if (value.is_array()) return value.empty() ? "an empty array" : "an array";
  if (value.is_string()) {
    const auto& s = value.get_ref<const std::string&>();
    constexpr size_t kMax = 40;
    if (s.size() <= kMax) return value.dump(-1, ' ', false, json::error_handler_t::replace);
    return json(brief(s, kMax)).dump(-1, ' ', false, json::error_handler_t::replace) + " (a string of " +
           std::to_string(s.size()) + " bytes)";
  }
  return value.dump();  // a number, true, false or null
}

Metrics read_metrics(const std::string& path) {
  if (data::file_kind(path) != "missing") data::check_input_file(path, "metrics file");
  std::ifstream in(path);
  check(in.good(), "no metrics.jsonl in '", fs::path(path).parent_path().string(),
        "' (is it a run directory, the out_dir of a loom train run?)");
  Metrics m;
  std::vector<std::pair<size_t, double>> starts;  // (records read before it, its step)
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    json r;
    try {
      r = json::parse(line);
    } catch (const json::exception& e) {
      fail(path, " line ", n, " is not JSON: ", brief(e.what()));  // the parser quotes the token it read
    }
    check_metrics_record(r, path, n);
    const std::string kind = r.value("kind", "");
    if (kind == "start") {
      starts.emplace_back(m.records.size(), r["step"].get<double>());
      continue;
    }
    if (kind != "train" && kind != "val") continue;
    MetricsRecord rec;
    rec.step = r["step"].get<double>();
    if (kind == "val") {
      rec.kind = MetricsRecord::Kind::Val;
      rec.loss = number_or(r, "val_loss", kNaN);
    } else {
      rec.loss = number_or(r, "loss", kNaN);
      rec.tokens_per_s = number_or(r, "tokens_per_s", kNaN);
      rec.mfu = number_or(r, "mfu", 0);
      rec.comm_s = number_or(r, "comm_s", 0);
      rec.comm_exposed_s = number_or(r, "comm_exposed_s", 0);
      rec.moe_load_imbalance = number_or(r, "moe_load_imbalance", 0);
      if (const auto it = r.find("moe_load"); it != r.end()) {
        double total = 0;
        for (const json& x : *it) total += x.get<double>();
        if (total > 0) {  // as shares: a float per expert drawn is all the chart needs
          rec.moe_experts = it->size();
          rec.moe_begin = m.moe_share.size();
          for (size_t e = 0; e < std::min(rec.moe_experts, kMaxExpertLines); ++e)
            m.moe_share.push_back(to_float(100.0 * (*it)[e].get<double>() / total));
        }
      }
    }
    m.records.push_back(rec);
  }
  // A start at step S abandons the steps above S logged before it. Walking back from the end,
  // a record survives when its step is at most every later start's step.
  double bound = std::numeric_limits<double>::infinity();
  std::vector<bool> dropped(m.records.size(), false);
  for (size_t i = m.records.size(), k = starts.size(); i-- > 0;) {
    while (k > 0 && starts[k - 1].first > i) bound = std::min(bound, starts[--k].second);
    dropped[i] = m.records[i].step > bound;
  }
  size_t kept = 0;
  for (size_t i = 0; i < m.records.size(); ++i)
    if (!dropped[i]) m.records[kept++] = m.records[i];
  m.records.resize(kept);
  // Plotted in step order: lines never run back, whatever order the attempts logged in.
  // Checked first: stable_sort takes a buffer of half the records even when they are in order.
  auto by_step = [](const MetricsRecord& a, const MetricsRecord& b) { return a.step < b.step; };
  if (!std::is_sorted(m.records.begin(), m.records.end(), by_step))
    std::stable_sort(m.records.begin(), m.records.end(), by_step);
  return m;
}

}  // namespace loom::report
