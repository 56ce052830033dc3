// A synthetic power-law graph for scaling runs: R-MAT (Chakrabarti et al. 2004) with the
// Graph500 parameters a = 0.57, b = 0.19, c = 0.19 (d = 0.05): each edge picks one quadrant
// of the adjacency matrix per bit of the node index, so degrees follow a power law. Node
// labels are then shuffled (as Graph500 does) so the hubs are not the low indices. The same
// seed gives the same graph on every machine.
#pragma once

#include <cstdint>
#include <string>

#include "loom/data/graph.hpp"

namespace loom::data {

struct RmatOptions {
  int64_t scale = 10;        // N = 2^scale nodes
  int64_t edge_factor = 16;  // E = edge_factor * N generated edges (duplicates and self-loops included)
  int64_t features = 32;     // F, uniform in [0, 1)
  int64_t classes = 8;       // K, labels uniform; nodes split 10% train, 10% val, 80% test by index
  int64_t seed = 1;
  double a = 0.57, b = 0.19, c = 0.19;
};

Graph make_rmat_graph(const RmatOptions& options);
// The same graph as a GraphSource: its edges generated as they are streamed, its features
// again when they are (for_each_feature_row). The features come after the edges in the random
// stream, the labels after the features: opening skips the edges' draws without making the
// edges (the engine's discard), and the features' too when they are not kept.
std::unique_ptr<GraphSource> open_rmat_graph(const RmatOptions& options, bool keep_features = true);
// "rmat:scale=16,edge_factor=8,features=128,classes=16,seed=3" (any subset of the keys after
// "rmat:", each at most once); loom::Error naming an unknown or repeated key or a bad value.
RmatOptions parse_rmat_spec(const std::string& spec);

}  // namespace loom::data
