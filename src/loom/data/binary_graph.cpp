// Loom's binary graph format (graph.hpp: write_binary_graph), for graphs too large to parse
// as text each run: a fixed header, then the arrays as they lie in memory, little-endian.
//   bytes 0-7   magic "LOOMGRPH"
//   8-11        version (uint32, 1)
//   12-15       reserved (uint32, 0)
//   16-47       N, E, F, K (int64 each)
//   then        src (E int64), dst (E int64), features (N*F float32, row-major),
//               labels (N int32, -1 = unlabelled), split (N int8: 0 none, 1 train, 2 val, 3 test)
// The reader checks the header, that the file holds exactly these bytes, and every value's
// range (features finite), naming the file and what is wrong.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include "loom/data/graph.hpp"
#include "loom/data/input_file.hpp"
#include "loom/error.hpp"

namespace loom::data {

namespace {

constexpr char kMagic[8] = {'L', 'O', 'O', 'M', 'G', 'R', 'P', 'H'};
constexpr uint32_t kVersion = 1;
constexpr int64_t kHeaderBytes = 48;

template <class T>
void put(std::ofstream& out, const T* data, int64_t n) {
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(n * static_cast<int64_t>(sizeof(T))));
}

}  // namespace

void write_binary_graph(const Graph& g, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  check(out.good(), "cannot write graph '", path, "'");
  const uint32_t head[2] = {kVersion, 0};
  const int64_t sizes[4] = {g.num_nodes, static_cast<int64_t>(g.src.size()), g.num_features, g.num_classes};
  out.write(kMagic, sizeof kMagic);
  put(out, head, 2);
  put(out, sizes, 4);
  put(out, g.src.data(), sizes[1]);
  put(out, g.dst.data(), sizes[1]);
  put(out, g.features.data(), g.num_nodes * g.num_features);
  put(out, g.labels.data(), g.num_nodes);
  put(out, reinterpret_cast<const int8_t*>(g.split.data()), g.num_nodes);
  out.flush();
  check(out.good(), "cannot write graph '", path, "' (disk full?)");
}

namespace {

// The nodes' arrays read at open (the features, when kept, checked a chunk of rows at a
// time); the edges streamed from their two arrays in chunks, the features likewise.
class BinarySource : public GraphSource {
 public:
  BinarySource(const std::string& path, bool keep_features) : path_(path) {
    keep_features_ = keep_features;
    const int64_t size = check_input_file(path, "graph file", kMaxGraphFileBytes);
    std::ifstream in(path, std::ios::binary);
    check(in.good(), "cannot open graph file '", path, "'");
    check(size >= kHeaderBytes, path, ": ", size, " bytes, shorter than the ", kHeaderBytes,
          "-byte header of a Loom binary graph");
    char magic[8];
    uint32_t head[2];
    int64_t sizes[4];
    in.read(magic, 8);
    in.read(reinterpret_cast<char*>(head), sizeof head);
    in.read(reinterpret_cast<char*>(sizes), sizeof sizes);
    check(std::memcmp(magic, kMagic, 8) == 0, path, ": not a Loom binary graph (its first 8 bytes are not \"LOOMGRPH\")");
    check(head[0] == kVersion, path, ": binary graph version ", head[0], ", this Loom reads version ", kVersion);
    const int64_t N = sizes[0], E = sizes[1], F = sizes[2], K = sizes[3];
    check(N > 0 && E >= 0 && F > 0 && K > 0 && N < (int64_t{1} << 31) && F < (int64_t{1} << 31) &&
              K <= kMaxGraphClasses && E < (int64_t{1} << 40),
          path, ": impossible sizes in the header: N ", N, ", E ", E, ", F ", F, ", K ", K, " (at most ", kMaxGraphClasses,
          " classes)");
    const int64_t want = kHeaderBytes + 16 * E + 4 * N * F + 4 * N + N;
    check(size == want, path, ": ", size, " bytes, but a graph of N ", N, ", E ", E, ", F ", F, " takes ", want,
          " (truncated or not this format)");
    Graph& g = nodes_;
    g.name = path;
    g.num_nodes = N, g.num_features = F, g.num_classes = K;
    edges_ = E;
    if (keep_features) {
      g.features.reserve(static_cast<size_t>(N * F));
      read_feature_rows([](int64_t) { return true; }, [this](int64_t, const float* row) { add_feature_row(row); });
    }
    g.labels.resize(static_cast<size_t>(N));
    g.split.resize(static_cast<size_t>(N));
    in.seekg(kHeaderBytes + 16 * E + 4 * N * F);
    in.read(reinterpret_cast<char*>(g.labels.data()), 4 * N);
    in.read(reinterpret_cast<char*>(g.split.data()), N);
    check(in.good(), path, ": read failed");
    for (int64_t i = 0; i < N; ++i) {
      const int32_t l = g.labels[static_cast<size_t>(i)];
      const auto sp = static_cast<int8_t>(g.split[static_cast<size_t>(i)]);
      check(l >= -1 && l < K, path, ": node ", i, " has label ", l, ", outside -1..", K - 1);
      check(sp >= 0 && sp <= 3, path, ": node ", i, " has split ", static_cast<int>(sp), ", not 0 (none) .. 3 (test)");
    }
  }

  int64_t known_edges() const override { return edges_; }

  void read_feature_rows(const std::function<bool(int64_t)>& wanted,
                         const std::function<void(int64_t, const float*)>& keep) override {
    std::ifstream in(path_, std::ios::binary);
    check(in.good(), "cannot open graph file '", path_, "'");
    in.seekg(kHeaderBytes + 16 * edges_);
    const int64_t N = nodes_.num_nodes, F = nodes_.num_features;
    const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 20) / F);  // rows: about 4 MiB
    std::vector<float> rows(static_cast<size_t>(std::min(chunk, N) * F));
    for (int64_t i0 = 0; i0 < N; i0 += chunk) {
      const int64_t n = std::min(chunk, N - i0);
      in.read(reinterpret_cast<char*>(rows.data()), 4 * n * F);
      check(in.good(), path_, ": read failed");
      for (int64_t k = 0; k < n; ++k) {
        const int64_t i = i0 + k;
        const float* row = rows.data() + k * F;
        // As the text formats refuse them: a NaN or inf feature makes every loss NaN.
        for (int64_t f = 0; f < F; ++f)
          check(std::isfinite(row[f]), path_, ": node ", i, " has feature ", f, " = ", row[f], ", not a finite number");
        if (wanted(i)) keep(i, row);
      }
    }
  }

  void for_each_edge(const std::function<void(int64_t, int64_t)>& edge) override {
    std::ifstream src(path_, std::ios::binary), dst(path_, std::ios::binary);
    check(src.good() && dst.good(), "cannot open graph file '", path_, "'");
    src.seekg(kHeaderBytes);
    dst.seekg(kHeaderBytes + 8 * edges_);
    constexpr int64_t kChunk = 1 << 16;
    std::vector<int64_t> s(kChunk), d(kChunk);
    const int64_t N = nodes_.num_nodes;
    for (int64_t e0 = 0; e0 < edges_; e0 += kChunk) {
      const int64_t n = std::min(kChunk, edges_ - e0);
      src.read(reinterpret_cast<char*>(s.data()), 8 * n);
      dst.read(reinterpret_cast<char*>(d.data()), 8 * n);
      check(src.good() && dst.good(), path_, ": read failed");
      for (int64_t k = 0; k < n; ++k) {
        const int64_t a = s[static_cast<size_t>(k)], b = d[static_cast<size_t>(k)];
        check(a >= 0 && a < N && b >= 0 && b < N, path_, ": edge ", e0 + k, " (", a, " -> ", b,
              ") names a node outside 0..", N - 1);
        edge(a, b);
      }
    }
  }

 private:
  std::string path_;
  int64_t edges_ = 0;
};

}  // namespace

std::unique_ptr<GraphSource> open_binary_graph(const std::string& path, bool keep_features) {
  return std::make_unique<BinarySource>(path, keep_features);
}

}  // namespace loom::data
