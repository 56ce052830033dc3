#include "loom/data/graph.hpp"

#include <zlib.h>

#include <cmath>
#include <sstream>

#include "loom/data/input_file.hpp"
#include "loom/data/rmat.hpp"
#include "loom/error.hpp"

namespace loom::data {

namespace {

// pygcn's split of Cora by file order: 140 train, 300 validation, 1000 test nodes.
constexpr const char* kPygcnSplit = "0:140,200:500,500:1500";

template <class T>
uLong crc_of(uLong crc, const std::vector<T>& v) {
  const auto* bytes = reinterpret_cast<const Bytef*>(v.data());
  size_t left = v.size() * sizeof(T);
  while (left > 0) {  // crc32 takes at most 4 GiB at a time
    const uInt n = static_cast<uInt>(std::min<size_t>(left, 1u << 30));
    crc = crc32(crc, bytes, n);
    bytes += n;
    left -= n;
  }
  return crc;
}

}  // namespace

int64_t Graph::count(NodeSplit s) const {
  int64_t n = 0;
  for (NodeSplit x : split) n += x == s ? 1 : 0;
  return n;
}

std::string Graph::summary() const {
  std::ostringstream os;
  os << name << ": " << num_nodes << " nodes, " << src.size() << " edges, " << num_features << " features, "
     << num_classes << " classes; train " << count(NodeSplit::Train) << ", val " << count(NodeSplit::Val) << ", test "
     << count(NodeSplit::Test);
  return os.str();
}

std::string Graph::identity() const {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (const auto* v : {&src, &dst}) crc = crc_of(crc, *v);
  crc = crc_of(crc, features);
  crc = crc_of(crc, labels);
  crc = crc_of(crc, split);
  std::ostringstream os;
  os << "graph:" << num_nodes << " nodes," << src.size() << " edges," << num_features << " features," << num_classes
     << " classes,crc32 " << std::hex << crc;
  return os.str();
}

void apply_split_ranges(Graph& g, const std::string& ranges) {
  const NodeSplit order[3] = {NodeSplit::Train, NodeSplit::Val, NodeSplit::Test};
  std::vector<NodeSplit> split(static_cast<size_t>(g.num_nodes), NodeSplit::None);
  std::stringstream items(ranges);
  int k = 0;
  for (std::string item; std::getline(items, item, ','); ++k) {
    long long begin = -1, end = -1;
    char colon = 0, rest = 0;
    std::istringstream in(item);
    const bool parsed = static_cast<bool>(in >> begin >> colon >> end) && colon == ':' && !(in >> rest);
    check(k < 3 && parsed && 0 <= begin && begin < end, "split must be three node ranges 'A:B,C:D,E:F' (train, val, test; "
          "half-open, in file order), got '", ranges, "'");
    check(end <= g.num_nodes, "split '", ranges, "': range ", begin, ":", end, " goes past the ", g.num_nodes,
          " nodes of ", g.name);
    for (long long i = begin; i < end; ++i) {
      check(split[static_cast<size_t>(i)] == NodeSplit::None, "split '", ranges, "': node ", i, " is in two ranges");
      split[static_cast<size_t>(i)] = order[k];
    }
  }
  check(k == 3, "split must be three node ranges 'A:B,C:D,E:F' (train, val, test), got '", ranges, "'");
  for (int64_t i = 0; i < g.num_nodes; ++i)
    check(split[static_cast<size_t>(i)] == NodeSplit::None || g.labels[static_cast<size_t>(i)] >= 0, "split '", ranges,
          "': node ", i, " is unlabelled");
  g.split = std::move(split);
}

void row_normalize_features(Graph& g) {
  const int64_t F = g.num_features;
  for (int64_t i = 0; i < g.num_nodes; ++i) {
    float* row = g.features.data() + i * F;
    double sum = 0.0;
    for (int64_t f = 0; f < F; ++f) sum += std::fabs(row[f]);
    if (sum > 0.0)
      for (int64_t f = 0; f < F; ++f) row[f] = static_cast<float>(row[f] / sum);
  }
}

Graph load_graph(const std::string& data, const std::string& split) {
  Graph g;
  std::string labels_from = data;  // where the labels were read, for messages
  if (data.rfind("rmat:", 0) == 0) {
    g = make_rmat_graph(parse_rmat_spec(data));
  } else if (data.size() > 7 && data.ends_with(".lgraph")) {
    g = read_binary_graph(data);
  } else if (file_kind(data + ".content") != "missing") {
    g = read_linqs_graph(data);
    labels_from = data + ".content";
    if (split.empty()) apply_split_ranges(g, kPygcnSplit);
  } else if (file_kind(data + ".edges") != "missing") {
    g = read_text_graph(data);
    labels_from = data + ".labels";
  } else {
    fail("no graph at '", data, "': expected ", data, ".content and ", data, ".cites (LINQS), ", data, ".edges, ", data,
         ".features and ", data, ".labels (Loom's text format, docs/graphs.md), or 'rmat:scale=S,...'");
  }
  if (!split.empty()) apply_split_ranges(g, split);
  check(g.count(NodeSplit::Train) > 0, g.name, ": no training nodes (set split, or mark nodes 'train' in the labels file)");
  // One class is nothing to classify: training would reach loss 0 and report success.
  std::vector<bool> present(static_cast<size_t>(g.num_classes), false);
  int64_t classes = 0;
  for (const int32_t l : g.labels)
    if (l >= 0 && !present[static_cast<size_t>(l)]) present[static_cast<size_t>(l)] = true, ++classes;
  check(classes >= 2, labels_from, ": the labelled nodes hold ", classes,
        classes == 1 ? " class" : " classes", "; node classification needs at least 2");
  return g;
}

}  // namespace loom::data
