#include "loom/report/expert_load.hpp"

#include <algorithm>

#include "loom/report/charts.hpp"

namespace loom::report {

std::string expert_load_chart(const std::vector<nlohmann::json>& metrics, const std::vector<std::string>& colors) {
  std::vector<Series> experts;
  Series imbalance{"max / mean", colors.back(), {}};
  for (const nlohmann::json& r : metrics) {
    if (r.value("kind", "") != "train" || !r.contains("moe_load") || !r["moe_load"].is_array()) continue;
    const std::vector<double> load = r["moe_load"].get<std::vector<double>>();
    double total = 0;
    for (double l : load) total += l;
    if (total <= 0) continue;
    const double step = r["step"].get<double>();
    for (size_t e = experts.size(); e < load.size(); ++e)
      experts.push_back({"expert " + std::to_string(e), colors[e % (colors.size() - 1)], {}});
    for (size_t e = 0; e < load.size(); ++e) experts[e].points.emplace_back(step, 100.0 * load[e] / total);
    imbalance.points.emplace_back(step, r.value("moe_load_imbalance", 0.0));
  }
  if (experts.empty()) return "";
  return "<div class=\"row\">" + line_chart("load per expert", "step", "share of assignments (%)", experts) +
         line_chart("load imbalance", "step", "max / mean", {imbalance}) + "</div>\n";
}

}  // namespace loom::report
