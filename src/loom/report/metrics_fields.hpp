// The fields of a metrics.jsonl record that the run report reads, taken from the line in one
// pass of nlohmann's SAX parser, without building a JSON tree (the tree's allocations and
// key lookups were a third of the time `loom report` took on a long file). The fast path
// takes only lines that are plainly well formed; anything else (a parse error, a field of
// another type, a repeated field the report reads) goes to the JSON tree and its checks,
// which name the problem, so both paths accept the same lines and read the same values.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace loom::report {

struct RecordFields {
  std::string kind;  // "" when absent
  // Each when present and a number (a null loss is absent).
  std::optional<double> step, loss, val_loss, tokens_per_s, mfu, comm_s, comm_exposed_s, moe_load_imbalance,
      moe_rank_imbalance;
  size_t moe_experts = 0;           // moe_load's length
  double moe_total = 0;             // and sum, in order
  std::vector<double> moe_first;    // its first `keep_experts` values
};

// record's fields; record has passed the checks of parse_metrics_record.
RecordFields fields_of(const nlohmann::json& record, size_t keep_experts);

// The fields of the record on line `text`, or nullopt when the line needs the JSON tree.
std::optional<RecordFields> fast_fields(std::string_view text, size_t keep_experts);

}  // namespace loom::report
