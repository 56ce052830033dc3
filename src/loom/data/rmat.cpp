#include "loom/data/rmat.hpp"

#include <algorithm>
#include <memory>
#include <charconv>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

#include "loom/data/rmat_quadrants.hpp"
#include "loom/error.hpp"

namespace loom::data {

namespace {

class RmatSource : public GraphSource {
 public:
  RmatSource(const RmatOptions& o, bool keep_features) : o_(o), quadrants_(o.a, o.b, o.c) {
    keep_features_ = keep_features;
    check(o.scale >= 1 && o.scale <= 30, "rmat scale must be in 1..30, got ", o.scale);
    check(o.edge_factor >= 1 && o.edge_factor <= 1024, "rmat edge_factor must be in 1..1024, got ", o.edge_factor);
    check(o.features >= 1 && o.features <= 65536, "rmat features must be in 1..65536, got ", o.features);
    check(o.classes >= 2 && o.classes <= kMaxGraphClasses, "rmat classes must be in 2..", kMaxGraphClasses, ", got ",
          o.classes);
    Graph& g = nodes_;
    g.num_nodes = int64_t{1} << o.scale;
    g.num_features = o.features;
    g.num_classes = o.classes;
    const int64_t N = g.num_nodes;
    std::mt19937_64 rng(static_cast<uint64_t>(o.seed));
    relabel_.resize(static_cast<size_t>(N));
    std::iota(relabel_.begin(), relabel_.end(), 0);
    std::shuffle(relabel_.begin(), relabel_.end(), rng);
    edges_rng_ = rng;
    // The features' draws come after the edges': `scale` engine words an edge, one a bit (as
    // many as uniform doubles took: generate_canonical takes ceil(53 / 64) = 1 word of a 64-bit
    // engine).
    rng.discard(static_cast<unsigned long long>(known_edges() * o.scale));
    features_rng_ = rng;
    if (keep_features) {
      std::vector<float> row(static_cast<size_t>(o.features));
      g.features.reserve(static_cast<size_t>(N * o.features));
      for (int64_t i = 0; i < N; ++i) {
        draw_row(rng, row.data());
        add_feature_row(row.data());
      }
    } else {
      rng.discard(static_cast<unsigned long long>(N * o.features));  // drawn once, when streamed
    }
    std::uniform_int_distribution<int32_t> label(0, static_cast<int32_t>(o.classes - 1));
    g.labels.resize(static_cast<size_t>(N));
    g.split.resize(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i) {
      g.labels[static_cast<size_t>(i)] = label(rng);
      g.split[static_cast<size_t>(i)] = 10 * i < N ? NodeSplit::Train : (10 * i < 2 * N ? NodeSplit::Val : NodeSplit::Test);
    }
    std::ostringstream name;
    name << "rmat:scale=" << o.scale << ",edge_factor=" << o.edge_factor << ",features=" << o.features
         << ",classes=" << o.classes << ",seed=" << o.seed;
    g.name = name.str();
  }

  int64_t known_edges() const override { return o_.edge_factor * nodes_.num_nodes; }

  void for_each_edge(const std::function<void(int64_t, int64_t)>& edge) override {
    std::mt19937_64 rng = edges_rng_;
    for_each_draw(rng, edge);
  }

  void read_feature_rows(const std::function<bool(int64_t)>& wanted,
                         const std::function<void(int64_t, const float*)>& keep) override {
    std::mt19937_64 rng = features_rng_;
    std::vector<float> row(static_cast<size_t>(o_.features));
    for (int64_t i = 0; i < nodes_.num_nodes; ++i) {
      if (!wanted(i)) {
        rng.discard(static_cast<unsigned long long>(o_.features));  // a float feature: one engine word
        continue;
      }
      draw_row(rng, row.data());
      keep(i, row.data());
    }
  }

 private:
  void draw_row(std::mt19937_64& rng, float* row) const {
    std::uniform_real_distribution<float> feature(0.0f, 1.0f);
    for (int64_t f = 0; f < o_.features; ++f) row[f] = feature(rng);
  }

  // The E edges' draws from rng, each edge (relabelled) to f: a quadrant a bit, from one
  // engine word compared in integers (rmat_quadrants.hpp: the same quadrants as the doubles).
  // In batches: a batch's draws first, then its relabelling, so that the reads of relabel_
  // (random, mostly cache misses at 2^17 nodes) wait together rather than one edge at a time.
  template <class F>
  void for_each_draw(std::mt19937_64& rng, const F& f) const {
    constexpr int64_t kBatch = 64;
    uint64_t rows[kBatch], cols[kBatch];
    int32_t src[kBatch], dst[kBatch];
    const int64_t E = o_.edge_factor * nodes_.num_nodes;
    for (int64_t first = 0; first < E; first += kBatch) {
      const int64_t n = std::min(kBatch, E - first);
      for (int64_t e = 0; e < n; ++e) {
        uint64_t row = 0, col = 0;
        for (int64_t bit = 0; bit < o_.scale; ++bit) {
          const uint64_t w = rng();
          row = (row << 1) | quadrants_.down(w);
          col = (col << 1) | quadrants_.right(w);
        }
        rows[e] = row, cols[e] = col;
      }
      for (int64_t e = 0; e < n; ++e) src[e] = relabel_[rows[e]], dst[e] = relabel_[cols[e]];
      for (int64_t e = 0; e < n; ++e) f(src[e], dst[e]);
    }
  }

  RmatOptions o_;
  RmatQuadrants quadrants_;
  std::vector<int32_t> relabel_;  // the shuffle of node labels (N <= 2^30; half the cache of int64)
  std::mt19937_64 edges_rng_;     // the engine as the edges' draws start
  std::mt19937_64 features_rng_;  // and as the features' draws start
};

}  // namespace

std::unique_ptr<GraphSource> open_rmat_graph(const RmatOptions& o, bool keep_features) {
  return std::make_unique<RmatSource>(o, keep_features);
}

Graph make_rmat_graph(const RmatOptions& o) { return read_whole(*open_rmat_graph(o)); }

RmatOptions parse_rmat_spec(const std::string& spec) {
  check(spec.rfind("rmat:", 0) == 0, "an R-MAT graph is named 'rmat:scale=S,...', got '", spec, "'");
  RmatOptions o;
  std::set<std::string> given;  // a key twice would silently take the last value
  std::stringstream items(spec.substr(5));
  for (std::string item; std::getline(items, item, ',');) {
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    int64_t* target = key == "scale" ? &o.scale
                      : key == "edge_factor" ? &o.edge_factor
                      : key == "features" ? &o.features
                      : key == "classes" ? &o.classes
                      : key == "seed" ? &o.seed : nullptr;
    check(target != nullptr && eq != std::string::npos, "'", spec, "': unknown R-MAT key '", key,
          "' (keys: scale, edge_factor, features, classes, seed, as key=value)");
    check(given.insert(key).second, "'", spec, "': R-MAT key '", key, "' is given twice");
    const std::string value = item.substr(eq + 1);
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), *target);
    check(ec == std::errc() && end == value.data() + value.size(), "'", spec, "': ", key,
          " must be an integer, got '", value, "'");
  }
  check(o.seed >= 0, "'", spec, "': seed must be >= 0, got ", o.seed);
  return o;
}

}  // namespace loom::data
