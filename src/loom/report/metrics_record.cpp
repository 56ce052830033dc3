#include "loom/report/metrics_record.hpp"

#include <algorithm>
#include <limits>
#include <optional>

#include "loom/error.hpp"
#include "loom/report/json_values.hpp"
#include "loom/report/metrics_fields.hpp"

namespace loom::report {

namespace {

using nlohmann::json;

// r's fields as the sections read them. The messages are built only for a bad field: this
// runs for each of a million lines.
void check_metrics_record(const json& r, const std::string& path, int64_t line) {
  auto where = [&] { return path + " line " + std::to_string(line); };
  if (!r.is_object()) fail(where(), ": expected a JSON object, got ", describe(r));
  auto typed = [&](const std::string& key, const json& value, bool ok, const char* what) {
    if (!ok) fail(where(), ": field '", brief(key, 64), "' must be ", what, ", got ", describe(value));
  };
  if (r.contains("kind")) typed("kind", r["kind"], r["kind"].is_string(), "a string");
  const std::string kind = r.value("kind", "");
  if (kind == "train" || kind == "val" || kind == "start") {
    if (!r.contains("step")) fail(where(), ": a ", kind, " record without a 'step'");
    typed("step", r["step"], r["step"].is_number(), "a number");
  }
  for (const auto& [key, value] : r.items()) {
    if (key == "loss" || key.ends_with("_loss"))
      typed(key, value, value.is_number() || value.is_null(), "a number (or null)");
    else if (key == "tokens_per_s" || key == "mfu" || key == "comm_s" || key == "comm_exposed_s" ||
             key == "moe_load_imbalance" || key == "moe_rank_imbalance")
      typed(key, value, value.is_number(), "a number");
  }
  if (r.contains("moe_load")) {
    const json& load = r["moe_load"];
    typed("moe_load", load, load.is_array() && std::all_of(load.begin(), load.end(), [](const json& x) { return x.is_number(); }),
          "an array of numbers");
  }
}

// v as a float; a damaged record's value beyond float's range (negative loads) saturates,
// where converting it would be undefined.
float to_float(double v) {
  constexpr double kMax = std::numeric_limits<float>::max();
  return static_cast<float>(std::clamp(v, -kMax, kMax));
}

}  // namespace

MetricsRecord parse_metrics_record(std::string_view text, const std::string& path, int64_t line) {
  std::optional<RecordFields> f = fast_fields(text, kMaxExpertLines);
  if (!f) {  // the JSON tree and its checks name what is wrong, if anything
    json r;
    try {
      r = json::parse(text.begin(), text.end());
    } catch (const json::exception& e) {
      fail(path, " line ", line, " is not JSON: ", brief(e.what()));  // the parser quotes the token it read
    }
    check_metrics_record(r, path, line);
    f = fields_of(r, kMaxExpertLines);
  }
  MetricsRecord rec;
  if (f->kind == "start") rec.kind = MetricsRecord::Kind::Start;
  else if (f->kind == "train") rec.kind = MetricsRecord::Kind::Train;
  else if (f->kind == "val") rec.kind = MetricsRecord::Kind::Val;
  else return rec;
  rec.step = *f->step;
  if (rec.kind == MetricsRecord::Kind::Val) {
    rec.loss = f->val_loss.value_or(kNaN);
  } else if (rec.kind == MetricsRecord::Kind::Train) {
    rec.loss = f->loss.value_or(kNaN);
    rec.tokens_per_s = f->tokens_per_s.value_or(kNaN);
    rec.mfu = f->mfu.value_or(0);
    rec.comm_s = f->comm_s.value_or(0);
    rec.comm_exposed_s = f->comm_exposed_s.value_or(0);
    rec.moe_load_imbalance = f->moe_load_imbalance.value_or(0);
    rec.moe_rank_imbalance = f->moe_rank_imbalance.value_or(0);
    if (f->moe_total > 0) {  // as shares: a float per expert drawn is all the chart needs
      rec.moe_experts = f->moe_experts;
      for (const double x : f->moe_first) rec.moe_share.push_back(to_float(100.0 * x / f->moe_total));
    }
  }
  return rec;
}

}  // namespace loom::report
