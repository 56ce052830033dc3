// The run report's per-expert load chart: each expert's share of the routed assignments over
// the logged steps (metrics.jsonl's moe_load, summed over the MoE layers), with the max/mean
// imbalance the progress line shows and, where ranks share the experts out, the busiest rank's
// rows over the mean rank's (moe_rank_imbalance). A balanced mixture of E experts sits at 100 / E %.
#pragma once

#include <string>
#include <vector>

#include "loom/report/metrics.hpp"

namespace loom::report {

// The chart's SVG, or "" when no record has moe_load (a dense model). colors: one per expert
// (cycled), then the imbalance line's. At most kMaxExpertLines experts are drawn.
std::string expert_load_chart(const Metrics& metrics, const std::vector<std::string>& colors);

}  // namespace loom::report
