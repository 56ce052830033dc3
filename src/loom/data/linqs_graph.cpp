// The LINQS citation format (Sen et al. 2008; Cora as pygcn ships it):
//   <prefix>.content: "<paper id> <F words, 0/1> <class name>" per node, whitespace-separated;
//   <prefix>.cites:   "<cited id> <citing id>" per link.
// Nodes keep file order (pygcn's split is by file order); classes are numbered in sorted
// order of their names. Ids are arbitrary integers and must be unique.
#include <algorithm>
#include <unordered_map>

#include "loom/data/graph.hpp"
#include "loom/data/text_lines.hpp"

namespace loom::data {

namespace {

// The content file read at open (its ids kept to number the cites' ends); the cites file read
// when the edges are streamed.
class LinqsSource : public GraphSource {
 public:
  explicit LinqsSource(const std::string& prefix) : prefix_(prefix) {
    Graph& g = nodes_;
    g.name = prefix;
    std::vector<std::string> class_of_node;
    {
      TextLines content(prefix + ".content", "graph content file", kMaxGraphFileBytes);
      std::vector<std::string_view> fields;
      int64_t first_line = 0;
      while (content.next(fields)) {
        if (fields.size() < 3)
          content.fail_here("expected '<paper id> <features...> <class>', got ", fields.size(), " field(s)");
        const int64_t F = static_cast<int64_t>(fields.size()) - 2;
        if (g.num_nodes == 0) {
          g.num_features = F;
          first_line = content.line_number();
        } else if (F != g.num_features) {
          content.fail_here(F, " feature values, expected ", g.num_features, " (as on line ", first_line, ")");
        }
        const int64_t id = content.to_int(fields[0], "paper id");
        const auto [it, fresh] = index_of_.emplace(id, g.num_nodes);
        if (!fresh) content.fail_here("paper id ", id, " appears twice (first as node ", it->second, ")");
        for (int64_t f = 0; f < F; ++f) g.features.push_back(content.to_float(fields[static_cast<size_t>(f + 1)], "feature"));
        class_of_node.emplace_back(fields.back());
        ++g.num_nodes;
      }
      check(g.num_nodes > 0, prefix, ".content: empty graph (no nodes)");
    }
    g.class_names = class_of_node;
    std::sort(g.class_names.begin(), g.class_names.end());
    g.class_names.erase(std::unique(g.class_names.begin(), g.class_names.end()), g.class_names.end());
    g.num_classes = static_cast<int64_t>(g.class_names.size());
    for (const std::string& name : class_of_node)
      g.labels.push_back(static_cast<int32_t>(
          std::lower_bound(g.class_names.begin(), g.class_names.end(), name) - g.class_names.begin()));
    g.split.assign(static_cast<size_t>(g.num_nodes), NodeSplit::None);
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

std::unique_ptr<GraphSource> open_linqs_graph(const std::string& prefix) { return std::make_unique<LinqsSource>(prefix); }

}  // namespace loom::data
