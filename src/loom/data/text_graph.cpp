// Loom's text format for a user's graph (docs/graphs.md; scripts/convert_graph.py writes it):
//   <prefix>.edges:    "<src> <dst>" per edge, node indices 0..N-1;
//   <prefix>.features: one row of F numbers per node, node i on the i-th row;
//   <prefix>.labels:   "<class> <split>" per node: class in 0..K-1 or -1 (unlabelled),
//                      split one of train, val, test, none.
// Blank lines and lines starting with '#' are skipped. N is the number of feature rows, K
// one more than the largest class.
#include "loom/data/graph.hpp"
#include "loom/data/feature_rows.hpp"
#include "loom/data/text_lines.hpp"

namespace loom::data {

namespace {

NodeSplit parse_split(const TextLines& lines, std::string_view word) {
  if (word == "train") return NodeSplit::Train;
  if (word == "val") return NodeSplit::Val;
  if (word == "test") return NodeSplit::Test;
  if (word == "none") return NodeSplit::None;
  lines.fail_here("split must be train, val, test or none, got '", word, "'");
}

// The features and labels read at open; the edges file read when they are streamed, the
// features file again when the features are.
class TextSource : public GraphSource {
 public:
  TextSource(const std::string& prefix, bool keep_features) : prefix_(prefix) {
    keep_features_ = keep_features;
    Graph& g = nodes_;
    g.name = prefix;
    std::vector<std::string_view> fields;
    read_features(rows_at_open(), [this](int64_t, const float* row) { add_feature_row(row); });
    {
      TextLines labels(prefix + ".labels", "graph labels file", kMaxGraphFileBytes);
      while (labels.next(fields)) {
        if (fields.size() != 2) labels.fail_here("expected '<class> <split>', got ", fields.size(), " field(s)");
        if (static_cast<int64_t>(g.labels.size()) == g.num_nodes)
          labels.fail_here("more labels than the ", g.num_nodes, " nodes of ", prefix, ".features");
        const int64_t label = labels.to_int(fields[0], "class");
        if (label < -1 || label >= kMaxGraphClasses)
          labels.fail_here("class must be -1 or in 0..", kMaxGraphClasses - 1, " (at most ", kMaxGraphClasses,
                           " classes), got ", label);
        const NodeSplit split = parse_split(labels, fields[1]);
        if (split != NodeSplit::None && label < 0) labels.fail_here("an unlabelled node (class -1) cannot be in a split");
        g.labels.push_back(static_cast<int32_t>(label));
        g.split.push_back(split);
        g.num_classes = std::max<int64_t>(g.num_classes, label + 1);
      }
      check(static_cast<int64_t>(g.labels.size()) == g.num_nodes, prefix, ".labels: ", g.labels.size(),
            " labels for the ", g.num_nodes, " nodes of ", prefix, ".features (missing from line ",
            labels.line_number() + 1, ")");
    }
  }

  // At open (num_nodes 0: counting the rows and their width, parsing them only when kept) and
  // again when streamed.
  void read_features(const std::function<bool(int64_t)>& wanted, const std::function<void(int64_t, const float*)>& keep) {
    TextLines features(prefix_ + ".features", "graph features file", kMaxGraphFileBytes);
    FeatureRows rows(nodes_, wanted, keep);
    std::vector<std::string_view> fields;
    while (features.next(fields)) rows.add(features, fields, 0, 0);
    rows.finish(features);
  }

  void read_feature_rows(const std::function<bool(int64_t)>& wanted,
                         const std::function<void(int64_t, const float*)>& keep) override {
    read_features(wanted, keep);
  }

  void for_each_edge(const std::function<void(int64_t, int64_t)>& edge) override {
    const int64_t N = nodes_.num_nodes;
    std::vector<std::string_view> fields;
    TextLines edges(prefix_ + ".edges", "graph edges file", kMaxGraphFileBytes);
    while (edges.next(fields)) {
      if (fields.size() != 2) edges.fail_here("expected '<src> <dst>', got ", fields.size(), " field(s)");
      int64_t ends[2];
      for (int k = 0; k < 2; ++k) {
        const int64_t v = edges.to_int(fields[static_cast<size_t>(k)], "node index");
        if (v < 0 || v >= N) edges.fail_here("node ", v, " is out of range: the graph has ", N, " nodes (0..", N - 1, ")");
        ends[k] = v;
      }
      edge(ends[0], ends[1]);
    }
  }

 private:
  std::string prefix_;
};

}  // namespace

std::unique_ptr<GraphSource> open_text_graph(const std::string& prefix, bool keep_features) {
  return std::make_unique<TextSource>(prefix, keep_features);
}

}  // namespace loom::data
