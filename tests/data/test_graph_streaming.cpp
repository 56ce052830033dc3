// The graph readers' second pass over the nodes (GraphSource::for_each_feature_row), which
// lets a rank of a 3D grid keep only its rows of the features: each format hands out exactly
// the rows asked for, equal bit for bit to the graph read whole; a source opened without its
// features reads none of their values at open and digests them, as before (the identity a
// checkpoint records: R-MAT's and Cora's as they were before the second pass existed), as its
// first stream reads each row once; and a text file is streamed through a buffer, not held
// whole.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "loom/data/graph.hpp"
#include "loom/data/text_lines.hpp"
#include "test_util.hpp"

namespace loom::data {
namespace {

namespace fs = std::filesystem;

const std::string kCora = LOOM_SOURCE_DIR "/data/cora";
const std::string kRmat = "rmat:scale=10";

struct Dir {
  fs::path path = testing::fresh_temp_dir("loom_graph_streaming_" + std::to_string(::getpid()));
  ~Dir() { fs::remove_all(path); }
};

// g in Loom's text format under prefix (features printed so they read back exactly).
void write_text_graph(const Graph& g, const std::string& prefix) {
  std::ofstream features(prefix + ".features"), labels(prefix + ".labels"), edges(prefix + ".edges");
  char number[32];
  for (int64_t i = 0; i < g.num_nodes; ++i) {
    for (int64_t f = 0; f < g.num_features; ++f) {
      std::snprintf(number, sizeof number, "%.9g", static_cast<double>(g.features[static_cast<size_t>(i * g.num_features + f)]));
      features << (f == 0 ? "" : " ") << number;
    }
    features << "\n";
    const char* split[] = {"none", "train", "val", "test"};
    labels << g.labels[static_cast<size_t>(i)] << " " << split[static_cast<int>(g.split[static_cast<size_t>(i)])] << "\n";
  }
  for (size_t e = 0; e < g.src.size(); ++e) edges << g.src[e] << " " << g.dst[e] << "\n";
}

TEST(GraphStreaming, EveryFormatHandsOutTheRowsAskedForAsReadWhole) {
  Dir dir;
  const std::string text = (dir.path / "t").string(), binary = (dir.path / "b.lgraph").string();
  write_text_graph(load_graph(kRmat, ""), text);
  write_binary_graph(load_graph(kCora, ""), binary);
  for (const std::string& data : {kCora, kRmat, text, binary}) {
    SCOPED_TRACE(data);
    const Graph whole = load_graph(data, "");
    const auto source = open_graph(data, "", /*keep_features=*/false);
    EXPECT_TRUE(source->nodes().features.empty());
    // Opened without its features, it has read none of their values yet (a grid's GCN reads
    // them once, in build()) ...
    EXPECT_EQ(source->feature_rows_read(), 0);
    EXPECT_FALSE(source->features_digested());
    const int64_t F = whole.num_features, N = whole.num_nodes;
    for (const int pass : {1, 2}) {
      int64_t rows = 0, next = 1;
      source->for_each_feature_row([](int64_t node) { return node % 3 == 1; }, [&](int64_t node, const float* values) {
        EXPECT_EQ(node, next);
        EXPECT_EQ(std::memcmp(values, whole.features.data() + node * F, static_cast<size_t>(F) * sizeof(float)), 0)
            << "node " << node;
        next += 3, ++rows;
      });
      EXPECT_EQ(rows, (N + 1) / 3);
      // ... and the first stream reads every row, digesting them as read whole; a later one
      // only the rows asked for.
      EXPECT_TRUE(source->features_digested());
      EXPECT_EQ(source->nodes().nodes_crc(source->features_crc()), whole.nodes_crc());
      EXPECT_EQ(source->feature_rows_read(), pass == 1 ? N : N + (N + 1) / 3) << "pass " << pass;
    }
    // Kept, every row is read once, at open.
    EXPECT_EQ(open_graph(data, "", true)->feature_rows_read(), N);
    // And the graph read whole through it is the same graph.
    EXPECT_EQ(read_whole(*open_graph(data, "", false)).identity(), whole.identity());
  }
}

TEST(GraphStreaming, IdentitiesAreThoseCheckpointsRecorded) {
  // As written by Loom before the features were read in a second pass (checkpoints resume).
  EXPECT_EQ(load_graph(kRmat, "").identity(), "graph:1024 nodes,16384 edges,32 features,8 classes,crc32 40a4c3e8");
  EXPECT_EQ(load_graph(kCora, "").identity(), "graph:2708 nodes,5429 edges,1433 features,7 classes,crc32 4095cc82");
}

TEST(TextLines, StreamsTheFileThroughABuffer) {
  Dir dir;
  const std::string path = (dir.path / "lines.txt").string();
  constexpr int64_t kLines = 400000;  // about 5 MiB, several buffers
  const std::string long_line(3 << 20, 'x');  // longer than a buffer: it grows
  {
    std::ofstream out(path, std::ios::binary);
    for (int64_t i = 0; i < kLines; ++i) out << i << " " << i + 1 << (i % 7 == 0 ? "\r\n" : "\n");
    out << "# a comment\n\n" << long_line << "\n" << "last 1";  // no newline at the end
  }
  TextLines lines(path, "test file", int64_t{1} << 30);
  std::vector<std::string_view> fields;
  for (int64_t i = 0; i < kLines; ++i) {
    ASSERT_TRUE(lines.next(fields));
    ASSERT_EQ(fields.size(), 2u);
    ASSERT_EQ(lines.to_int(fields[0], "a"), i);
    ASSERT_EQ(lines.to_int(fields[1], "b"), i + 1);
    ASSERT_EQ(lines.line_number(), i + 1);
  }
  ASSERT_TRUE(lines.next(fields));
  EXPECT_EQ(fields, (std::vector<std::string_view>{long_line}));
  EXPECT_EQ(lines.line_number(), kLines + 3);
  ASSERT_TRUE(lines.next(fields));
  EXPECT_EQ(fields, (std::vector<std::string_view>{"last", "1"}));
  EXPECT_EQ(testing::error_of([&] { lines.to_int(fields[0], "node"); }),
            path + ":" + std::to_string(kLines + 4) + ": node must be an integer, got 'last'");
  EXPECT_FALSE(lines.next(fields));
  EXPECT_FALSE(lines.next(fields));
  // It held a buffer as long as the longest line (rounded up), not the file.
  EXPECT_LT(lines.buffer_bytes(), static_cast<int64_t>(fs::file_size(path)) / 2 + static_cast<int64_t>(long_line.size()));
  EXPECT_LE(lines.buffer_bytes(), 2 * static_cast<int64_t>(long_line.size()));
}

}  // namespace
}  // namespace loom::data
