// A node-classification graph as the GCN reads it: edges, one feature row and one label per
// node, and which nodes train, validate and test. Three sources make one (graph.cpp picks by
// the `data` value): the LINQS citation format (Cora's `.content` + `.cites`), Loom's own
// text format for users' graphs (docs/graphs.md), and the synthetic R-MAT generator
// ("rmat:scale=16,..."). Every reader names the file and line of the first bad record.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace loom::data {

class EdgeDigest;

enum class NodeSplit : int8_t { None = 0, Train = 1, Val = 2, Test = 3 };

struct Graph {
  std::string name;  // the data value it was read from, for messages
  int64_t num_nodes = 0;     // N
  int64_t num_features = 0;  // F
  int64_t num_classes = 0;   // K
  std::vector<int64_t> src, dst;        // (E) edges as read, node indices in [0, N); the GCN symmetrises them
  std::vector<float> features;          // (N, F) row-major
  std::vector<int32_t> labels;          // (N) in [0, K), -1 = unlabelled
  std::vector<NodeSplit> split;         // (N)
  std::vector<std::string> class_names; // (K) when the source names them (LINQS)

  int64_t count(NodeSplit s) const;
  // "cora: 2708 nodes, 5429 edges, 1433 features, 7 classes; train 140, val 300, test 1000";
  // edges: how many, for a graph whose edges were streamed past (GraphSource) and not kept.
  std::string summary() const { return summary(static_cast<int64_t>(src.size())); }
  std::string summary(int64_t edges) const;
  // A digest of everything the model sees (sizes, edges, features, labels, split), which a
  // checkpoint records so a resume on another graph is refused.
  std::string identity() const;
  // The same from its parts, for a graph whose edges were streamed past (their digest) and
  // whose features have changed, or gone, since nodes_crc() was taken of them as read.
  uint32_t nodes_crc() const;  // of features, labels, split
  // The same, the features' part given (GraphSource::features_crc, for features not kept).
  uint32_t nodes_crc(uint32_t features_crc) const;
  std::string identity(const EdgeDigest& edges, uint32_t nodes_crc) const;
};

// The edges' part of Graph::identity, one edge at a time: the crc32 of every src, then every
// dst (as the arrays lie in memory), joined with crc32_combine at the end.
class EdgeDigest {
 public:
  void add(int64_t src, int64_t dst);
  int64_t count() const { return count_; }
  uint32_t crc() const;  // of src then dst; flushes what add() buffered
  static EdgeDigest of(const std::vector<int64_t>& src, const std::vector<int64_t>& dst);

 private:
  void flush() const;
  mutable uint32_t src_crc_ = 0, dst_crc_ = 0;
  mutable std::vector<int64_t> src_buf_, dst_buf_;  // crc32 per 8 bytes is slow: batched
  int64_t count_ = 0;
};

// A graph read in passes, so that a caller can keep only some of its edges and of its nodes'
// features: the source reads the nodes (labels, split, and the features' shape) when opened,
// then for_each_edge hands each edge, in file order, to a callback and keeps none, and
// for_each_feature_row reads the features again, handing out the rows a caller wants. Opened
// with its features kept, it reads, checks and digests every feature at open; opened without
// them, it reads no value at open and the first for_each_feature_row reads, checks and digests
// every row (handing out the wanted ones), so each value is parsed (or drawn) once. A file's
// lines are still walked twice (their shape at open, their values streamed): a GCN's memory
// check runs between the two, and holding a grid rank's rows across it would allocate its
// shard of the features before the check (nor are its rows known at open). Errors name the
// file and line (or the edge's or node's index) of the first bad record; every reader of the
// same file meets the same one.
class GraphSource {
 public:
  virtual ~GraphSource() = default;
  // The nodes: a Graph whose src and dst are empty, and its features too when not kept.
  const Graph& nodes() const { return nodes_; }
  Graph& nodes() { return nodes_; }
  // The nodes, moved out; nodes() keeps the name and sizes (the edges and features still stream).
  Graph take_nodes();
  // Every edge, src -> dst, in the order the source holds them; each call streams them again
  // (a grid's GCN counts them at open and reads them into its blocks in build()).
  virtual void for_each_edge(const std::function<void(int64_t src, int64_t dst)>& edge) = 0;
  // How many edges for_each_edge will hand out, when known before (-1: not).
  virtual int64_t known_edges() const { return -1; }
  // Whether every feature has been digested: at open when kept, else by the first
  // for_each_feature_row.
  bool features_digested() const { return digested_rows_ > 0 && digested_rows_ == nodes_.num_nodes; }
  // The crc32 of every feature as read (N x F, row-major), once features_digested(): what
  // nodes_crc digests of the features, for a caller that keeps only some of them.
  uint32_t features_crc() const;
  // Each node's F features as read, in node order, to row(node, values) for the nodes that
  // wanted(node) keeps (the others may be passed over unparsed, once digested).
  void for_each_feature_row(const std::function<bool(int64_t node)>& wanted,
                            const std::function<void(int64_t node, const float* values)>& row);
  // Feature rows the source has parsed (or drawn, or handed out of those kept) so far, at open
  // and in every for_each_feature_row: what a test counts to see each value read once.
  int64_t feature_rows_read() const { return rows_read_; }

 protected:
  // The format's read of its features, as for_each_feature_row; the readers read their file
  // again, this default hands out the rows kept at open (failing when there are none).
  virtual void read_feature_rows(const std::function<bool(int64_t node)>& wanted,
                                 const std::function<void(int64_t node, const float* values)>& row);
  // Which rows a format reads at open: every one when its features are kept, none (the file's
  // shape alone) when they are not.
  std::function<bool(int64_t)> rows_at_open() const {
    return [keep = keep_features_](int64_t) { return keep; };
  }
  // A row of num_features values read at open (every row, when kept): into features_crc, and
  // kept.
  void add_feature_row(const float* values);
  Graph nodes_;
  bool keep_features_ = true;

 private:
  void digest_feature_row(const float* values);
  uint32_t features_crc_ = 0;
  int64_t digested_rows_ = 0, rows_read_ = 0;
};

// The largest graph file read (features as text are ~2-10 bytes per value).
constexpr int64_t kMaxGraphFileBytes = int64_t{16} << 30;
// The most classes a graph's labels may number (class ids 0..65535; docs/graphs.md): far past
// any node-classification data set, and an id beyond is damage, not a class (it sizes the
// model's output layer).
constexpr int64_t kMaxGraphClasses = 65536;

// Reads the graph `data` names: "<prefix>" with <prefix>.content and <prefix>.cites (LINQS),
// or <prefix>.edges, <prefix>.features and <prefix>.labels (Loom's text format), or an R-MAT
// specification "rmat:scale=S[,edge_factor=16,features=F,classes=K,seed=X]". split, when not
// empty, replaces the source's split by node ranges in file order, "0:140,200:500,500:1500"
// (train, val, test); a LINQS graph without one gets pygcn's split of Cora. loom::Error names
// the file and line of the first bad record.
Graph load_graph(const std::string& data, const std::string& split);
// The same graph as a GraphSource (its nodes read and checked, split applied, its edges not
// yet read; its features kept when keep_features): load_graph is this with every edge kept.
std::unique_ptr<GraphSource> open_graph(const std::string& data, const std::string& split, bool keep_features = true);

// Sets the split from "A:B,C:D,E:F" (train, val, test node ranges, half-open, in file order).
void apply_split_ranges(Graph& graph, const std::string& ranges);

// Divides each feature row by the sum of its absolute values (rows of zeros stay zero): the
// row normalisation Kipf & Welling apply to bag-of-words features. row_normalize: one row.
void row_normalize_features(Graph& graph);
void row_normalize(float* row, int64_t features);

// Readers, each checking every file through check_input_file first; keep_features as in open_graph.
std::unique_ptr<GraphSource> open_linqs_graph(const std::string& prefix, bool keep_features = true);
std::unique_ptr<GraphSource> open_text_graph(const std::string& prefix, bool keep_features = true);
// Loom's binary format (binary_graph.cpp: a "LOOMGRPH" header with a version, then the arrays),
// read when `data` ends in ".lgraph"; write_binary_graph makes one from any graph.
std::unique_ptr<GraphSource> open_binary_graph(const std::string& path, bool keep_features = true);
void write_binary_graph(const Graph& graph, const std::string& path);
// The source's nodes with every edge and feature kept; read_edges appends the edges to g,
// read_features the features (when g has none).
Graph read_whole(GraphSource& source);
void read_edges(GraphSource& source, Graph& g);
void read_features(GraphSource& source, Graph& g);

}  // namespace loom::data
