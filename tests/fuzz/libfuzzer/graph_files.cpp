// Fuzz target: the graph readers (LINQS .content/.cites, Loom's text .features/.labels/.edges)
// and Loom's binary .lgraph through load_graph, as `loom train --model gcn --data PREFIX --split S`
// reads them. The input's first byte picks the format (3 mod 4: binary, else even: LINQS, odd:
// text); the rest is the files' contents and the split, separated by '\x01' bytes (a binary
// file takes the rest whole), written under a scratch prefix. A graph that loads
// is normalised and digested as the trainer does; anything but a loom::Error fails.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "fuzz_target.hpp"
#include "loom/data/graph.hpp"

namespace {

std::vector<std::string> split_parts(const std::string& s, size_t n) {
  std::vector<std::string> parts;
  size_t at = 0;
  while (parts.size() + 1 < n) {
    const size_t cut = s.find('\x01', at);
    if (cut == std::string::npos) break;
    parts.push_back(s.substr(at, cut - at));
    at = cut + 1;
  }
  parts.push_back(s.substr(std::min(at, s.size())));
  parts.resize(n);
  return parts;
}

// A directory of this process's own, removed at exit.
struct ScratchDir {
  std::string path = std::filesystem::temp_directory_path() / ("loom_fuzz_graph_" + std::to_string(::getpid()));
  ScratchDir() { std::filesystem::create_directories(path); }
  ~ScratchDir() { std::filesystem::remove_all(path); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const ScratchDir scratch;
  const std::string& dir = scratch.path;
  const std::string prefix = dir + "/g";
  if (data[0] % 4 == 3) {
    std::filesystem::remove(prefix + ".lgraph");
    return loom::fuzz::accept_or_loom_error(data + 1, size - 1, [&](const std::string& input) {
      std::ofstream(prefix + ".lgraph", std::ios::binary) << input;
      loom::data::Graph g = loom::data::load_graph(prefix + ".lgraph", "");
      loom::data::row_normalize_features(g);
      (void)g.identity();
      (void)g.summary();
    });
  }
  const bool linqs = data[0] % 2 == 0;
  const std::vector<std::string> exts = linqs ? std::vector<std::string>{"content", "cites"}
                                              : std::vector<std::string>{"features", "labels", "edges"};
  for (const char* e : {"content", "cites", "features", "labels", "edges"}) std::filesystem::remove(prefix + "." + e);
  return loom::fuzz::accept_or_loom_error(data + 1, size - 1, [&](const std::string& input) {
    const std::vector<std::string> parts = split_parts(input, exts.size() + 1);
    for (size_t i = 0; i < exts.size(); ++i) std::ofstream(prefix + "." + exts[i], std::ios::binary) << parts[i];
    loom::data::Graph g = loom::data::load_graph(prefix, parts.back());
    loom::data::row_normalize_features(g);
    (void)g.identity();
    (void)g.summary();
  });
}
