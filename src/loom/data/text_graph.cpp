// Loom's text format for a user's graph (docs/graphs.md; scripts/convert_graph.py writes it):
//   <prefix>.edges:    "<src> <dst>" per edge, node indices 0..N-1;
//   <prefix>.features: one row of F numbers per node, node i on the i-th row;
//   <prefix>.labels:   "<class> <split>" per node: class in 0..K-1 or -1 (unlabelled),
//                      split one of train, val, test, none.
// Blank lines and lines starting with '#' are skipped. N is the number of feature rows, K
// one more than the largest class.
#include "loom/data/graph.hpp"
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

// The features and labels read at open; the edges file read when they are streamed.
class TextSource : public GraphSource {
 public:
  explicit TextSource(const std::string& prefix) : prefix_(prefix) {
    Graph& g = nodes_;
    g.name = prefix;
    std::vector<std::string_view> fields;
    {
      TextLines features(prefix + ".features", "graph features file", kMaxGraphFileBytes);
      int64_t first_line = 0;
      while (features.next(fields)) {
        const int64_t F = static_cast<int64_t>(fields.size());
        if (g.num_nodes == 0) {
          g.num_features = F;
          first_line = features.line_number();
        } else if (F != g.num_features) {
          features.fail_here(F, " feature values, expected ", g.num_features, " (as on line ", first_line, ")");
        }
        for (std::string_view f : fields) g.features.push_back(features.to_float(f, "feature"));
        ++g.num_nodes;
      }
      check(g.num_nodes > 0, prefix, ".features: empty graph (no nodes)");
    }
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

std::unique_ptr<GraphSource> open_text_graph(const std::string& prefix) { return std::make_unique<TextSource>(prefix); }

}  // namespace loom::data
