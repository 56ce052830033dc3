// The node lines of a text graph file (Loom's .features, LINQS's .content) as a reader walks
// them, at open or again when the features stream (GraphSource::for_each_feature_row): each
// line's features must number as many as the first line's (at open that sets F; again, the F
// read at open), the nodes are counted (again: against the count read at open, the file may
// have changed), and only the rows wanted are parsed and handed out.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/data/graph.hpp"
#include "loom/data/text_lines.hpp"

namespace loom::data {

class FeatureRows {
 public:
  // g: the graph being read (num_nodes 0 while opening); wanted and keep as in for_each_feature_row.
  FeatureRows(Graph& g, const std::function<bool(int64_t)>& wanted, const std::function<void(int64_t, const float*)>& keep)
      : g_(g), opening_(g.num_nodes == 0), wanted_(wanted), keep_(keep) {}

  bool opening() const { return opening_; }
  // Checks that the next node's line holds F features, and that there is such a node.
  void check_width(const TextLines& lines, int64_t F) {
    if (node_ == 0) {
      if (opening_) g_.num_features = F;
      first_line_ = lines.line_number();
    }
    if (F != g_.num_features)
      lines.fail_here(F, " feature values, expected ", g_.num_features, " (as on line ", first_line_, ")");
    if (!opening_ && node_ == g_.num_nodes) lines.fail_here("more nodes than the ", g_.num_nodes, " read at open");
  }
  // The next node's line, its F features at fields[first, first + F) where F = fields.size() - extra.
  void add(const TextLines& lines, const std::vector<std::string_view>& fields, size_t first, size_t extra) {
    const auto F = static_cast<int64_t>(fields.size() - extra);
    check_width(lines, F);
    if (wanted_(node_)) {
      row_.resize(static_cast<size_t>(F));
      lines.to_floats(fields, first, static_cast<size_t>(F), row_.data(), "feature");
      keep_(node_, row_.data());
    }
    ++node_;
  }
  int64_t node() const { return node_; }  // the next line's
  // After the last line: the count of nodes set (at open) or checked.
  void finish(const TextLines& lines) {
    if (opening_) g_.num_nodes = node_;
    check(node_ > 0, lines.path(), ": empty graph (no nodes)");
    check(node_ == g_.num_nodes, lines.path(), ": ", node_, " nodes, but ", g_.num_nodes, " when it was opened");
  }

 private:
  Graph& g_;
  bool opening_;
  const std::function<bool(int64_t)>& wanted_;
  const std::function<void(int64_t, const float*)>& keep_;
  int64_t node_ = 0, first_line_ = 0;
  std::vector<float> row_;
};

}  // namespace loom::data
