// The LINQS citation format (Sen et al. 2008; Cora as pygcn ships it):
//   <prefix>.content: "<paper id> <F words, 0/1> <class name>" per node, whitespace-separated;
//   <prefix>.cites:   "<cited id> <citing id>" per link.
// Nodes keep file order (pygcn's split is by file order); classes are numbered in sorted
// order of their names. Ids are arbitrary integers and must be unique.
#include <algorithm>
#include <unordered_map>

#include "loom/data/graph.hpp"
#include "loom/data/feature_rows.hpp"
#include "loom/data/text_lines.hpp"

namespace loom::data {

namespace {

// The content file read at open (its ids kept to number the cites' ends), and again when the
// features are streamed; the cites file read when the edges are.
class LinqsSource : public GraphSource {
 public:
  LinqsSource(const std::string& prefix, bool keep_features) : prefix_(prefix) {
    keep_features_ = keep_features;
    Graph& g = nodes_;
    g.name = prefix;
    std::vector<std::string> class_of_node;
    read_content(rows_at_open(), [this](int64_t, const float* row) { add_feature_row(row); }, &class_of_node);
    g.class_names = class_of_node;
    std::sort(g.class_names.begin(), g.class_names.end());
    g.class_names.erase(std::unique(g.class_names.begin(), g.class_names.end()), g.class_names.end());
    g.num_classes = static_cast<int64_t>(g.class_names.size());
    for (const std::string& name : class_of_node)
      g.labels.push_back(static_cast<int32_t>(
          std::lower_bound(g.class_names.begin(), g.class_names.end(), name) - g.class_names.begin()));
    g.split.assign(static_cast<size_t>(g.num_nodes), NodeSplit::None);
  }

  // At open (num_nodes 0: numbering the ids, collecting the class names into classes, parsing
  // the features only when kept) and again when the features are streamed.
  void read_content(const std::function<bool(int64_t)>& wanted, const std::function<void(int64_t, const float*)>& keep,
                    std::vector<std::string>* classes) {
    TextLines content(prefix_ + ".content", "graph content file", kMaxGraphFileBytes);
    FeatureRows rows(nodes_, wanted, keep);
    std::vector<std::string_view> fields;
    while (content.next(fields)) {
      if (fields.size() < 3)
        content.fail_here("expected '<paper id> <features...> <class>', got ", fields.size(), " field(s)");
      rows.check_width(content, static_cast<int64_t>(fields.size()) - 2);  // before the id's checks
      if (rows.opening()) {
        const int64_t id = content.to_int(fields[0], "paper id");
        const auto [it, fresh] = index_of_.emplace(id, rows.node());
        if (!fresh) content.fail_here("paper id ", id, " appears twice (first as node ", it->second, ")");
        classes->emplace_back(fields.back());
      }
      rows.add(content, fields, 1, 2);
    }
    rows.finish(content);
  }

  void read_feature_rows(const std::function<bool(int64_t)>& wanted,
                         const std::function<void(int64_t, const float*)>& keep) override {
    read_content(wanted, keep, nullptr);
  }

  void for_each_edge(const std::function<void(int64_t, int64_t)>& edge) override {
    TextLines cites(prefix_ + ".cites", "graph cites file", kMaxGraphFileBytes);
    std::vector<std::string_view> fields;
    while (cites.next(fields)) {
      if (fields.size() != 2) cites.fail_here("expected '<cited id> <citing id>', got ", fields.size(), " field(s)");
      int64_t ends[2];
      for (int k = 0; k < 2; ++k) {
        const int64_t id = cites.to_int(fields[static_cast<size_t>(k)], "paper id");
        const auto it = index_of_.find(id);
        if (it == index_of_.end()) cites.fail_here("paper id ", id, " is not in ", prefix_, ".content");
        ends[k] = it->second;
      }
      edge(ends[1], ends[0]);  // the citing paper links to the cited one
    }
  }

 private:
  std::string prefix_;
  std::unordered_map<int64_t, int64_t> index_of_;  // paper id -> node
};

}  // namespace

std::unique_ptr<GraphSource> open_linqs_graph(const std::string& prefix, bool keep_features) {
  return std::make_unique<LinqsSource>(prefix, keep_features);
}

}  // namespace loom::data
