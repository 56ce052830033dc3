#include "loom/report/expert_load.hpp"

#include <algorithm>

#include "loom/report/charts.hpp"

namespace loom::report {

std::string expert_load_chart(const Metrics& metrics, const std::vector<std::string>& colors) {
  const size_t most = metrics.moe_experts;
  if (most == 0) return "";
  std::vector<Series> experts;
  for (size_t e = 0; e < metrics.expert_share.size(); ++e)
    experts.push_back({"expert " + std::to_string(e), colors[e % (colors.size() - 1)], metrics.expert_share[e]});
  std::vector<Series> imbalance{{"experts: max / mean", colors.back(), metrics.moe_imbalance}};
  if (!metrics.moe_rank_imbalance.empty())  // the experts shared out over ranks (ep, a grid's plane)
    imbalance.push_back({"ranks: busiest / mean", colors.front(), metrics.moe_rank_imbalance});
  const std::string title = most > kMaxExpertLines ? "load per expert (the first " + std::to_string(kMaxExpertLines) +
                                                         " of " + std::to_string(most) + ")"
                                                   : std::string("load per expert");
  return "<div class=\"row\">" + line_chart(title, "step", "share of assignments (%)", experts) +
         line_chart("load imbalance", "step", "max / mean", imbalance) + "</div>\n";
}

}  // namespace loom::report
