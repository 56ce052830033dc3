#include "loom/report/expert_load.hpp"

#include <algorithm>

#include "loom/report/charts.hpp"

namespace loom::report {

std::string expert_load_chart(const Metrics& metrics, const std::vector<std::string>& colors) {
  size_t most = 0;  // experts in the widest record
  for (const MetricsRecord& r : metrics.records) most = std::max(most, r.moe_experts);
  if (most == 0) return "";
  // One expert's line at a time, downsampled at once: E full-length series of a long run
  // would take E x 16 bytes per step.
  std::vector<Series> experts;
  std::vector<std::pair<double, double>> points;
  for (size_t e = 0; e < std::min(most, kMaxExpertLines); ++e) {
    points.clear();
    for (const MetricsRecord& r : metrics.records)
      if (r.moe_experts > e) points.emplace_back(r.step, metrics.moe_share[r.moe_begin + e]);
    experts.push_back({"expert " + std::to_string(e), colors[e % (colors.size() - 1)], downsample(points, kMaxLinePoints)});
  }
  Series imbalance{"max / mean", colors.back(), {}};
  for (const MetricsRecord& r : metrics.records)
    if (r.moe_experts > 0) imbalance.points.emplace_back(r.step, r.moe_load_imbalance);
  const std::string title = most > kMaxExpertLines ? "load per expert (the first " + std::to_string(kMaxExpertLines) +
                                                         " of " + std::to_string(most) + ")"
                                                   : std::string("load per expert");
  return "<div class=\"row\">" + line_chart(title, "step", "share of assignments (%)", experts) +
         line_chart("load imbalance", "step", "max / mean", {imbalance}) + "</div>\n";
}

}  // namespace loom::report
