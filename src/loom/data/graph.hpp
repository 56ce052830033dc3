// A node-classification graph as the GCN reads it: edges, one feature row and one label per
// node, and which nodes train, validate and test. Three sources make one (graph.cpp picks by
// the `data` value): the LINQS citation format (Cora's `.content` + `.cites`), Loom's own
// text format for users' graphs (docs/graphs.md), and the synthetic R-MAT generator
// ("rmat:scale=16,..."). Every reader names the file and line of the first bad record.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::data {

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
  // "cora: 2708 nodes, 5429 edges, 1433 features, 7 classes; train 140, val 300, test 1000"
  std::string summary() const;
  // A digest of everything the model sees (sizes, edges, features, labels, split), which a
  // checkpoint records so a resume on another graph is refused.
  std::string identity() const;
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

// Sets the split from "A:B,C:D,E:F" (train, val, test node ranges, half-open, in file order).
void apply_split_ranges(Graph& graph, const std::string& ranges);

// Divides each feature row by the sum of its absolute values (rows of zeros stay zero): the
// row normalisation Kipf & Welling apply to bag-of-words features.
void row_normalize_features(Graph& graph);

// Readers, each checking every file through check_input_file first.
Graph read_linqs_graph(const std::string& prefix);
Graph read_text_graph(const std::string& prefix);
// Loom's binary format (binary_graph.cpp: a "LOOMGRPH" header with a version, then the arrays),
// read when `data` ends in ".lgraph"; write_binary_graph makes one from any graph.
Graph read_binary_graph(const std::string& path);
void write_binary_graph(const Graph& graph, const std::string& path);

}  // namespace loom::data
