#include "loom/data/graph.hpp"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "loom/data/input_file.hpp"
#include "loom/data/rmat.hpp"
#include "loom/error.hpp"

namespace loom::data {

namespace {

// pygcn's split of Cora by file order: 140 train, 300 validation, 1000 test nodes.
constexpr const char* kPygcnSplit = "0:140,200:500,500:1500";

uLong crc_of_bytes(uLong crc, const void* data, size_t left) {
  const auto* bytes = static_cast<const Bytef*>(data);
  while (left > 0) {  // crc32 takes at most 4 GiB at a time
    const uInt n = static_cast<uInt>(std::min<size_t>(left, 1u << 30));
    crc = crc32(crc, bytes, n);
    bytes += n;
    left -= n;
  }
  return crc;
}

template <class T>
uLong crc_of(uLong crc, const std::vector<T>& v) {
  return crc_of_bytes(crc, v.data(), v.size() * sizeof(T));
}

}  // namespace

int64_t Graph::count(NodeSplit s) const {
  int64_t n = 0;
  for (NodeSplit x : split) n += x == s ? 1 : 0;
  return n;
}

std::string Graph::summary(int64_t edges) const {
  std::ostringstream os;
  os << name << ": " << num_nodes << " nodes, " << edges << " edges, " << num_features << " features, "
     << num_classes << " classes; train " << count(NodeSplit::Train) << ", val " << count(NodeSplit::Val) << ", test "
     << count(NodeSplit::Test);
  return os.str();
}

void EdgeDigest::add(int64_t src, int64_t dst) {
  src_buf_.push_back(src);
  dst_buf_.push_back(dst);
  ++count_;
  if (src_buf_.size() >= 4096) flush();
}

void EdgeDigest::flush() const {
  src_crc_ = static_cast<uint32_t>(crc_of(src_crc_, src_buf_));
  dst_crc_ = static_cast<uint32_t>(crc_of(dst_crc_, dst_buf_));
  src_buf_.clear();
  dst_buf_.clear();
}

uint32_t EdgeDigest::crc() const {
  flush();
  return static_cast<uint32_t>(crc32_combine(src_crc_, dst_crc_, static_cast<z_off_t>(count_ * 8)));
}

EdgeDigest EdgeDigest::of(const std::vector<int64_t>& src, const std::vector<int64_t>& dst) {
  EdgeDigest d;
  d.src_crc_ = static_cast<uint32_t>(crc_of(0, src));
  d.dst_crc_ = static_cast<uint32_t>(crc_of(0, dst));
  d.count_ = static_cast<int64_t>(src.size());
  return d;
}

std::string Graph::identity() const { return identity(EdgeDigest::of(src, dst), nodes_crc()); }

uint32_t Graph::nodes_crc() const { return nodes_crc(static_cast<uint32_t>(crc_of(0, features))); }

uint32_t Graph::nodes_crc(uint32_t features_crc) const {
  const uLong crc = crc_of(features_crc, labels);  // crc32 continues where the features' left off
  return static_cast<uint32_t>(crc_of(crc, split));
}

std::string Graph::identity(const EdgeDigest& edges, uint32_t nodes_crc) const {
  // From the sizes: a caller may have let the features go since it took nodes_crc.
  const auto node_bytes = static_cast<z_off_t>(num_nodes * num_features * sizeof(float) +
                                               labels.size() * sizeof(int32_t) + split.size() * sizeof(NodeSplit));
  const uLong crc = crc32_combine(edges.crc(), nodes_crc, node_bytes);
  std::ostringstream os;
  os << "graph:" << num_nodes << " nodes," << edges.count() << " edges," << num_features << " features," << num_classes
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

void row_normalize(float* row, int64_t F) {
  double sum = 0.0;
  for (int64_t f = 0; f < F; ++f) sum += std::fabs(row[f]);
  if (sum > 0.0)
    for (int64_t f = 0; f < F; ++f) row[f] = static_cast<float>(row[f] / sum);
}

void row_normalize_features(Graph& g) {
  if (g.features.empty()) return;  // not kept
  for (int64_t i = 0; i < g.num_nodes; ++i) row_normalize(g.features.data() + i * g.num_features, g.num_features);
}

void GraphSource::digest_feature_row(const float* values) {
  const auto F = static_cast<size_t>(nodes_.num_features);
  features_crc_ = static_cast<uint32_t>(crc_of_bytes(features_crc_, values, F * sizeof(float)));
  ++digested_rows_;
}

void GraphSource::add_feature_row(const float* values) {
  digest_feature_row(values);
  ++rows_read_;
  if (keep_features_) nodes_.features.insert(nodes_.features.end(), values, values + nodes_.num_features);
}

uint32_t GraphSource::features_crc() const {
  check(features_digested(), nodes_.name, ": its features were not kept when it was opened and have not been read yet");
  return features_crc_;
}

void GraphSource::for_each_feature_row(const std::function<bool(int64_t)>& wanted,
                                       const std::function<void(int64_t, const float*)>& row) {
  if (features_digested()) {
    read_feature_rows(wanted, [&](int64_t node, const float* values) { ++rows_read_, row(node, values); });
    return;
  }
  // Opened without them: every row read now, once, and digested in order on the way (from
  // the start again should an earlier read have failed part way).
  features_crc_ = 0, digested_rows_ = 0;
  read_feature_rows([](int64_t) { return true; }, [&](int64_t node, const float* values) {
    ++rows_read_;
    digest_feature_row(values);
    if (wanted(node)) row(node, values);
  });
}

void GraphSource::read_feature_rows(const std::function<bool(int64_t)>& wanted,
                                    const std::function<void(int64_t, const float*)>& row) {
  const int64_t N = nodes_.num_nodes, F = nodes_.num_features;
  check(static_cast<int64_t>(nodes_.features.size()) == N * F, nodes_.name,
        ": its features were not kept when it was opened, and this source cannot read them again");
  for (int64_t i = 0; i < N; ++i)
    if (wanted(i)) row(i, nodes_.features.data() + i * F);
}

Graph GraphSource::take_nodes() {
  Graph g = std::move(nodes_);
  nodes_ = Graph{};
  nodes_.name = g.name;
  nodes_.num_nodes = g.num_nodes, nodes_.num_features = g.num_features, nodes_.num_classes = g.num_classes;
  return g;
}

void read_features(GraphSource& source, Graph& g) {
  if (!g.features.empty()) return;
  g.features.resize(static_cast<size_t>(g.num_nodes * g.num_features));
  source.for_each_feature_row([](int64_t) { return true; }, [&g](int64_t i, const float* values) {
    std::copy_n(values, g.num_features, g.features.data() + i * g.num_features);
  });
}

void read_edges(GraphSource& source, Graph& g) {
  if (const int64_t E = source.known_edges(); E >= 0) g.src.reserve(static_cast<size_t>(E)), g.dst.reserve(static_cast<size_t>(E));
  source.for_each_edge([&g](int64_t s, int64_t d) { g.src.push_back(s), g.dst.push_back(d); });
}

Graph read_whole(GraphSource& source) {
  Graph g = source.take_nodes();
  read_features(source, g);
  read_edges(source, g);
  return g;
}

Graph load_graph(const std::string& data, const std::string& split) { return read_whole(*open_graph(data, split)); }

std::unique_ptr<GraphSource> open_graph(const std::string& data, const std::string& split, bool keep_features) {
  std::unique_ptr<GraphSource> source;
  std::string labels_from = data;  // where the labels were read, for messages
  if (data.rfind("rmat:", 0) == 0) {
    source = open_rmat_graph(parse_rmat_spec(data), keep_features);
  } else if (data.size() > 7 && data.ends_with(".lgraph")) {
    source = open_binary_graph(data, keep_features);
  } else if (file_kind(data + ".content") != "missing") {
    source = open_linqs_graph(data, keep_features);
    labels_from = data + ".content";
    if (split.empty()) apply_split_ranges(source->nodes(), kPygcnSplit);
  } else if (file_kind(data + ".edges") != "missing") {
    source = open_text_graph(data, keep_features);
    labels_from = data + ".labels";
  } else {
    fail("no graph at '", data, "': expected ", data, ".content and ", data, ".cites (LINQS), ", data, ".edges, ", data,
         ".features and ", data, ".labels (Loom's text format, docs/graphs.md), or 'rmat:scale=S,...'");
  }
  Graph& g = source->nodes();
  if (!split.empty()) apply_split_ranges(g, split);
  check(g.count(NodeSplit::Train) > 0, g.name, ": no training nodes (set split, or mark nodes 'train' in the labels file)");
  // One class is nothing to classify: training would reach loss 0 and report success.
  std::vector<bool> present(static_cast<size_t>(g.num_classes), false);
  int64_t classes = 0;
  for (const int32_t l : g.labels)
    if (l >= 0 && !present[static_cast<size_t>(l)]) present[static_cast<size_t>(l)] = true, ++classes;
  check(classes >= 2, labels_from, ": the labelled nodes hold ", classes,
        classes == 1 ? " class" : " classes", "; node classification needs at least 2");
  return source;
}

}  // namespace loom::data
