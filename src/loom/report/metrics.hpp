// What the run report reads from metrics.jsonl: of each train and val record only the
// fields it plots, so a million-line file is held in tens of MB rather than as a JSON tree
// per line. Records of a resumed run's abandoned attempt are dropped (see read_metrics).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace loom::report {

// A field a record does not have (a val record's tokens/s): charts skip it.
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct MetricsRecord {
  enum class Kind : uint8_t { Train, Val };
  Kind kind = Kind::Train;
  double step = 0;
  double loss = 0;  // train: "loss", val: "val_loss"; NaN when absent or null (a skipped step)
  double tokens_per_s = 0;  // NaN when absent
  double mfu = 0, comm_s = 0, comm_exposed_s = 0, moe_load_imbalance = 0;  // 0 when absent
  // moe_load's experts (0: none, or no assignment routed); the first kMaxExpertLines of their
  // shares are Metrics::moe_share[moe_begin, ...).
  size_t moe_experts = 0, moe_begin = 0;
};

// Experts whose share is kept (and drawn) at most, each a line of its own: a damaged record
// with a million-entry moe_load must not make a million-line chart.
constexpr size_t kMaxExpertLines = 64;

struct Metrics {
  std::vector<MetricsRecord> records;  // train and val records, sorted by step (file order among equal steps)
  std::vector<float> moe_share;        // train records' expert shares of the assignments, in %
};

// The records of the metrics.jsonl at path; loom::Error naming the file (and line) when it is
// missing or a line is not a record as the trainer writes it. A record {"kind": "start",
// "step": S} (a run starting, S = 0 or the checkpoint it resumed from) drops the train and val
// records before it whose step is above S: the attempt that logged them was killed or
// abandoned, and the run logs those steps again.
Metrics read_metrics(const std::string& path);

// A JSON value for a message: scalars as JSON (a long string cut, with its length), arrays and
// objects by kind only; dumping a deeply nested value would recurse off the stack.
std::string describe(const nlohmann::json& value);

// text cut to at most max bytes (on a UTF-8 character boundary), "..." marking the cut.
std::string brief(const std::string& text, size_t max = 200);

}  // namespace loom::report
