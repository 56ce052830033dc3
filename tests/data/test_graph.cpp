// The graph readers: Cora as the LINQS reader sees it (the counts the data's README
// verified), Loom's text format as scripts/convert_graph.py writes it (read back equal to the
// LINQS reader's graph), R-MAT's determinism, skew and unchanged draws, and each bad file's message naming
// the file and line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include "loom/data/graph.hpp"
#include "loom/data/rmat.hpp"
#include "loom/data/rmat_quadrants.hpp"
#include "run_command.hpp"
#include "test_util.hpp"

namespace loom::data {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

const std::string kCora = LOOM_SOURCE_DIR "/data/cora";

TEST(Graph, CoraReadsAsPygcnSeesIt) {
  const Graph g = load_graph(kCora, "");
  EXPECT_EQ(g.num_nodes, 2708);
  EXPECT_EQ(g.num_features, 1433);
  EXPECT_EQ(g.num_classes, 7);
  EXPECT_EQ(g.src.size(), 5429u);
  EXPECT_EQ(std::accumulate(g.features.begin(), g.features.end(), 0.0), 49216.0);
  EXPECT_EQ(g.count(NodeSplit::Train), 140);
  EXPECT_EQ(g.count(NodeSplit::Val), 300);
  EXPECT_EQ(g.count(NodeSplit::Test), 1000);
  EXPECT_EQ(g.split[139], NodeSplit::Train);
  EXPECT_EQ(g.split[140], NodeSplit::None);
  EXPECT_EQ(g.split[1499], NodeSplit::Test);
  // The first paper (31336) is Neural_Networks, class 2 of the sorted names.
  EXPECT_EQ(g.class_names[static_cast<size_t>(g.labels[0])], "Neural_Networks");
  const std::vector<int64_t> per_class = [&] {
    std::vector<int64_t> n(7, 0);
    for (int32_t l : g.labels) ++n[static_cast<size_t>(l)];
    return n;
  }();
  EXPECT_EQ(per_class, (std::vector<int64_t>{298, 418, 818, 426, 217, 180, 351}));
}

struct Files {
  fs::path dir = testing::fresh_temp_dir("loom_graph_" + std::to_string(::getpid()));
  ~Files() { fs::remove_all(dir); }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  }
  std::string prefix(const std::string& name) const { return (dir / name).string(); }
};

TEST(Graph, ConvertedCoraReadsBackAsTheLinqsGraph) {
  Files f;
  const testing::CommandResult r = testing::run_command(std::string(LOOM_PYTHON) + " " LOOM_SOURCE_DIR
                                                        "/scripts/convert_graph.py linqs " + kCora + " " + f.prefix("cora"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Graph a = load_graph(kCora, "0:140,200:500,500:1500"), b = load_graph(f.prefix("cora"), "0:140,200:500,500:1500");
  EXPECT_EQ(a.num_nodes, b.num_nodes);
  EXPECT_EQ(a.features, b.features);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.src, b.src);
  EXPECT_EQ(a.dst, b.dst);
  EXPECT_EQ(a.identity(), b.identity());
}

TEST(Graph, TextFormatWithItsOwnSplit) {
  Files f;
  f.write("g.features", "# two features\n1 0\n0 1\n0.5 0.5\n");
  f.write("g.labels", "0 train\n1 val\n-1 none\n");
  f.write("g.edges", "0 1\n1 2\n");
  const Graph g = load_graph(f.prefix("g"), "");
  EXPECT_EQ(g.num_nodes, 3);
  EXPECT_EQ(g.num_classes, 2);
  EXPECT_EQ(g.split, (std::vector<NodeSplit>{NodeSplit::Train, NodeSplit::Val, NodeSplit::None}));
}

TEST(Graph, BadFilesNameTheFileAndLine) {
  Files f;
  auto linqs = [&](const std::string& content, const std::string& cites) {
    f.write("l.content", content);
    f.write("l.cites", cites);
    return error_of([&] { load_graph(f.prefix("l"), "0:1,1:2,2:3"); });
  };
  const std::string p = f.prefix("l");
  EXPECT_EQ(linqs("1 0 1 A\n2 1 A\n", ""), p + ".content:2: 1 feature values, expected 2 (as on line 1)");
  EXPECT_EQ(linqs("1 0 A\n2 1 B\n3 0 A\n", "1 2\n1 9\n"), p + ".cites:2: paper id 9 is not in " + p + ".content");
  EXPECT_EQ(linqs("1 0 A\n1 1 B\n", ""), p + ".content:2: paper id 1 appears twice (first as node 0)");
  EXPECT_EQ(linqs("1 x A\n", ""), p + ".content:1: feature must be a finite number, got 'x'");
  EXPECT_EQ(linqs("", ""), p + ".content: empty graph (no nodes)");
  EXPECT_EQ(linqs("1 0 A\n2 1 B\n3 0 A\n", "1 2 3\n"), p + ".cites:1: expected '<cited id> <citing id>', got 3 field(s)");

  auto text = [&](const std::string& features, const std::string& labels, const std::string& edges) {
    f.write("t.features", features);
    f.write("t.labels", labels);
    f.write("t.edges", edges);
    return error_of([&] { load_graph(f.prefix("t"), ""); });
  };
  const std::string t = f.prefix("t");
  EXPECT_EQ(text("1 2\n3 4\n", "0 train\n1 val\n", "0 1\n1 2\n"),
            t + ".edges:2: node 2 is out of range: the graph has 2 nodes (0..1)");
  EXPECT_EQ(text("1 2\n3 4\n", "0 train\n1 val\n", "0 -1\n"),
            t + ".edges:1: node -1 is out of range: the graph has 2 nodes (0..1)");
  EXPECT_EQ(text("1 2\n3\n", "0 train\n1 val\n", ""), t + ".features:2: 1 feature values, expected 2 (as on line 1)");
  EXPECT_EQ(text("1 2\n3 4\n", "0 train\n", ""), t + ".labels: 1 labels for the 2 nodes of " + t +
                                                     ".features (missing from line 2)");
  EXPECT_EQ(text("1 2\n3 4\n", "0 train\n1 valid\n", ""),
            t + ".labels:2: split must be train, val, test or none, got 'valid'");
  EXPECT_EQ(text("\n# nothing\n", "", ""), t + ".features: empty graph (no nodes)");
  EXPECT_EQ(text("1 2\n3 4\n", "0 none\n1 none\n", "0 1\n"),
            t + ": no training nodes (set split, or mark nodes 'train' in the labels file)");

  // Every file passes the input-file check first.
  fs::create_directories(f.dir / "d.content");
  EXPECT_EQ(error_of([&] { load_graph(f.prefix("d"), ""); }),
            "graph content file '" + f.prefix("d") + ".content' is a directory, not a regular file");
  EXPECT_EQ(error_of([&] { load_graph(f.prefix("nothing"), ""); }).substr(0, 12), "no graph at ");
  EXPECT_EQ(error_of([&] { load_graph(kCora, "0:140,200:500,500:3000"); }),
            "split '0:140,200:500,500:3000': range 500:3000 goes past the 2708 nodes of " + kCora);
}

// Loom's binary format: a graph written and read back is the same graph; the converter
// script writes the same bytes for Cora; a bad header, a wrong size or a bad value is named.
TEST(Graph, BinaryFormatRoundTripsAndRefusesBadFiles) {
  Files f;
  RmatOptions o;
  o.scale = 6;
  o.features = 5;
  const Graph g = make_rmat_graph(o);
  const std::string path = f.prefix("g.lgraph");
  write_binary_graph(g, path);
  const Graph r = load_graph(path, "");
  EXPECT_EQ(r.num_nodes, g.num_nodes);
  EXPECT_EQ(r.num_classes, g.num_classes);
  EXPECT_EQ(r.src, g.src);
  EXPECT_EQ(r.dst, g.dst);
  EXPECT_EQ(r.features, g.features);
  EXPECT_EQ(r.labels, g.labels);
  EXPECT_EQ(r.split, g.split);

  const testing::CommandResult c = testing::run_command(std::string(LOOM_PYTHON) + " " LOOM_SOURCE_DIR
                                                        "/scripts/convert_graph.py linqs " + kCora + " " + f.prefix("cora.lgraph"));
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const Graph a = load_graph(kCora, "0:140,200:500,500:1500"), b = load_graph(f.prefix("cora.lgraph"), "0:140,200:500,500:1500");
  EXPECT_EQ(a.features, b.features);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.src, b.src);

  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto bad = [&](std::string content) {
    f.write("bad.lgraph", content);
    return error_of([&] { load_graph(f.prefix("bad.lgraph"), ""); });
  };
  const std::string p = f.prefix("bad.lgraph");
  EXPECT_EQ(bad("LOOM"), p + ": 4 bytes, shorter than the 48-byte header of a Loom binary graph");
  std::string other = bytes;
  other[0] = 'X';
  EXPECT_EQ(bad(other), p + ": not a Loom binary graph (its first 8 bytes are not \"LOOMGRPH\")");
  other = bytes;
  other[8] = 2;
  EXPECT_EQ(bad(other), p + ": binary graph version 2, this Loom reads version 1");
  EXPECT_NE(bad(bytes.substr(0, bytes.size() - 1)).find("(truncated or not this format)"), std::string::npos);
  other = bytes;
  const int64_t huge = 1000;
  std::memcpy(other.data() + 48, &huge, 8);  // the first edge's source
  EXPECT_EQ(bad(other), p + ": edge 0 (1000 -> " + std::to_string(g.dst[0]) + ") names a node outside 0..63");
  other = bytes;
  other[other.size() - 1] = 9;  // the last node's split
  EXPECT_EQ(bad(other), p + ": node 63 has split 9, not 0 (none) .. 3 (test)");
}

// The generator draws the graphs it drew when it compared each bit's uniform double with a,
// a + b and a + b + c: the identities (edges, features, labels, split) below were computed with
// that generator, at commit 95192dc, so a run's checkpoint from then resumes on the same graph.
TEST(Rmat, DrawsTheGraphsOfTheDoublesGenerator) {
  const std::pair<const char*, const char*> recorded[] = {
      {"rmat:scale=12,edge_factor=8,features=4,classes=3,seed=7",
       "graph:4096 nodes,32768 edges,4 features,3 classes,crc32 2497d02"},
      {"rmat:scale=16", "graph:65536 nodes,1048576 edges,32 features,8 classes,crc32 41417596"},
      {"rmat:scale=5,edge_factor=3,features=2,classes=2,seed=0", "graph:32 nodes,96 edges,2 features,2 classes,crc32 5f8277c2"},
  };
  for (const auto& [spec, identity] : recorded) EXPECT_EQ(make_rmat_graph(parse_rmat_spec(spec)).identity(), identity) << spec;
}

// The quadrant from the engine's word compared in integers is the quadrant its uniform double
// picked: at each threshold's word and its neighbours, and for a million words of the engine.
TEST(Rmat, IntegerQuadrantsAreTheDoublesQuadrants) {
  struct OneWord {  // what uniform_real_distribution<double> makes of one given word
    using result_type = uint64_t;
    static constexpr uint64_t min() { return 0; }
    static constexpr uint64_t max() { return ~uint64_t{0}; }
    uint64_t word;
    uint64_t operator()() const { return word; }
  };
  const auto unit = [](uint64_t w) {
    OneWord engine{w};
    return std::uniform_real_distribution<double>(0.0, 1.0)(engine);
  };
  const RmatOptions o;
  const RmatQuadrants q(o.a, o.b, o.c);
  const auto same_quadrant = [&](uint64_t w) {
    const double r = unit(w);
    const bool down = r >= o.a + o.b, right = (r >= o.a && r < o.a + o.b) || r >= o.a + o.b + o.c;
    return q.down(w) == (down ? 1u : 0u) && q.right(w) == (right ? 1u : 0u);
  };
  for (const double t : {o.a, o.a + o.b, o.a + o.b + o.c}) {
    const uint64_t first = first_word_drawing_at_least(t);
    EXPECT_GE(unit(first), t);
    EXPECT_LT(unit(first - 1), t);
    for (uint64_t w = first - 4096; w != first + 4096; ++w) ASSERT_TRUE(same_quadrant(w)) << "word " << w;
  }
  for (const uint64_t w : {uint64_t{0}, uint64_t{1}, ~uint64_t{0}, ~uint64_t{0} - 1024}) EXPECT_TRUE(same_quadrant(w)) << w;
  std::mt19937_64 rng(11);
  for (int i = 0; i < 1000000; ++i) ASSERT_TRUE(same_quadrant(rng()));
  EXPECT_EQ(first_word_drawing_at_least(0.0), 0u);
  EXPECT_NE(error_of([] { RmatQuadrants(0.5, 0.3, 0.2); }).find("a + b + c < 1"), std::string::npos);
}

TEST(Rmat, DeterministicFromTheSeedWithPowerLawDegrees) {
  const RmatOptions o = parse_rmat_spec("rmat:scale=12,edge_factor=8,features=4,classes=3,seed=7");
  EXPECT_EQ(o.scale, 12);
  const Graph a = make_rmat_graph(o), b = make_rmat_graph(o);
  EXPECT_EQ(a.src, b.src);
  EXPECT_EQ(a.dst, b.dst);
  EXPECT_EQ(a.features, b.features);
  RmatOptions other = o;
  other.seed = 8;
  EXPECT_NE(make_rmat_graph(other).src, a.src);
  EXPECT_EQ(a.num_nodes, 4096);
  EXPECT_EQ(a.src.size(), 8u * 4096u);
  std::vector<int64_t> degree(4096, 0);
  for (size_t e = 0; e < a.src.size(); ++e) ++degree[static_cast<size_t>(a.src[e])], ++degree[static_cast<size_t>(a.dst[e])];
  // Mean degree 16; R-MAT's hubs have far more, and many nodes far fewer.
  EXPECT_GT(*std::max_element(degree.begin(), degree.end()), 200);
  EXPECT_GT(std::count(degree.begin(), degree.end(), 0), 100);
  EXPECT_EQ(error_of([] { parse_rmat_spec("rmat:scale=4,edges=3"); }),
            "'rmat:scale=4,edges=3': unknown R-MAT key 'edges' (keys: scale, edge_factor, features, classes, seed, as key=value)");
}

}  // namespace
}  // namespace loom::data
