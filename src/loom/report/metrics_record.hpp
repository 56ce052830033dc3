// One line of metrics.jsonl as the run report reads it: a record checked to have the types
// the trainer writes (so a hand-edited or damaged line is named here rather than failing
// inside a chart), and of a train or val record only the fields the report draws.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace loom::report {

// A field a record does not have (a val record's tokens/s): charts skip it.
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Experts whose share is kept (and drawn) at most, each a line of its own: a damaged record
// with a million-entry moe_load must not make a million-line chart.
constexpr size_t kMaxExpertLines = 64;

struct MetricsRecord {
  // Start: {"kind": "start", "step": S}, a run beginning at step S (0, or the checkpoint it
  // resumed from). Other: any other kind, or none; not drawn.
  enum class Kind : uint8_t { Train, Val, Start, Other };
  Kind kind = Kind::Other;
  double step = 0;
  double loss = kNaN;          // train: "loss", val: "val_loss"; NaN when absent or null (a skipped step)
  double tokens_per_s = kNaN;  // NaN when absent
  double mfu = 0, comm_s = 0, comm_exposed_s = 0, moe_load_imbalance = 0;  // 0 when absent
  double moe_rank_imbalance = 0;  // 0 when absent (no experts shared out over ranks)
  size_t moe_experts = 0;       // moe_load's experts (0: none, or no assignment routed)
  std::vector<float> moe_share;  // the first kMaxExpertLines experts' shares of the assignments, in %
};

// The record on line `line` of the metrics file at path; loom::Error naming both when the
// text is not JSON or a field the report reads has another type than the trainer writes. A
// loss may be null: a non-finite loss (on_nan = "skip") is written as null.
MetricsRecord parse_metrics_record(std::string_view text, const std::string& path, int64_t line);

}  // namespace loom::report
