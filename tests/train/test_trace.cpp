// Traces: the recorder (off = nothing recorded, spans nest per thread, thread-safe), the
// trace window's steps, and `loom train --trace` under mpirun for a 2-rank DDP run and a
// 2-stage pipeline: valid Chrome trace JSON with one process per rank, the expected span
// kinds (module forward/backward, optimizer, all-reduce with bytes and algorithm, pipeline
// sends and receives) and properly nested spans on every thread row.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "loom/error.hpp"
#include "loom/trace/recorder.hpp"
#include "loom/train/trace_window.hpp"
#include "run_command.hpp"

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

TEST(TraceRecorder, RecordsNothingWhenOff) {
  loom::trace::stop();
  loom::trace::take_events();
  { loom::trace::Span s("forward", "blocks.0"); }
  EXPECT_TRUE(loom::trace::take_events().empty());
}

TEST(TraceRecorder, SpansNestAndThreadsRecordOnTheirRows) {
  loom::trace::start();
  {
    loom::trace::Span outer("step", "step");
    loom::trace::Span inner("forward", "blocks.0");
    inner.arg("mb", 3);
  }
  const int comm_row = loom::trace::row("comm test", /*unique=*/true);
  std::thread t([&] {
    loom::trace::set_thread_row(comm_row);
    for (int i = 0; i < 100; ++i) loom::trace::Span s("comm", "all_reduce");
  });
  for (int i = 0; i < 100; ++i) loom::trace::Span s("forward", "x");
  t.join();
  loom::trace::stop();
  std::vector<loom::trace::Event> events = loom::trace::take_events();
  int spans = 0, on_comm_row = 0;
  const loom::trace::Event *outer = nullptr, *inner = nullptr;
  for (const auto& e : events) {
    if (e.phase != 'X') continue;
    ++spans;
    on_comm_row += e.row == comm_row;
    if (e.name == "step") outer = &e;
    if (e.name == "blocks.0") inner = &e;
  }
  EXPECT_EQ(spans, 202);
  EXPECT_EQ(on_comm_row, 100);
  ASSERT_TRUE(outer && inner);
  EXPECT_EQ(inner->args["mb"], 3);
  EXPECT_LE(outer->ts_ns, inner->ts_ns);
  EXPECT_GE(outer->ts_ns + outer->dur_ns, inner->ts_ns + inner->dur_ns);
  EXPECT_EQ(loom::trace::row_names()[comm_row], "comm test");
}

// A rank's name gives its coordinate on every axis the layout has: cp only where sequences are
// split, a grid's depth, row and col in place of tp (once "tp" showed the depth coordinate).
TEST(TraceWindow, RankNamesGiveEveryAxisOfTheLayout) {
  loom::train::TrainConfig c;
  c.tp = 2;
  EXPECT_EQ(loom::train::rank_name(c, 1), "rank 1 (dp 0, pp 0, tp 1)");
  c.dp = 2;
  c.cp = 2;
  EXPECT_EQ(loom::train::rank_name(c, 5), "rank 5 (dp 1, pp 0, cp 0, tp 1)");
  c = loom::train::TrainConfig{};
  c.pp = 2;
  c.tp_3d = "2,1,2";
  EXPECT_EQ(loom::train::rank_name(c, 7), "rank 7 (dp 0, pp 1, depth 1, row 1, col 0)");
  EXPECT_EQ(loom::train::rank_name(c, 2), "rank 2 (dp 0, pp 0, depth 1, row 0, col 0)");
}

TEST(TraceWindow, ParsesSteps) {
  using loom::train::parse_trace_steps;
  EXPECT_EQ(parse_trace_steps("5:8", 100).first, 5);
  EXPECT_EQ(parse_trace_steps("5:8", 100).last, 8);
  EXPECT_EQ(parse_trace_steps("5:8", 6).last, 6);
  EXPECT_EQ(parse_trace_steps("7", 10).last, 7);
  EXPECT_EQ(parse_trace_steps("", 100).first, 2);
  EXPECT_EQ(parse_trace_steps("", 100).last, 4);
  EXPECT_EQ(parse_trace_steps("", 1).first, 1);
  for (const char* bad : {"a:b", "0:3", "5-8", ":"})
    EXPECT_THROW(parse_trace_steps(bad, 100), loom::Error) << bad;
  EXPECT_THROW(parse_trace_steps("9:4", 100), loom::Error);
  try {
    parse_trace_steps("50:60", 10);
    FAIL();
  } catch (const loom::Error& e) {
    EXPECT_NE(std::string(e.what()).find("starts after the run's last step (10)"), std::string::npos) << e.what();
  }
}

// Runs `loom train --trace` under mpirun and returns the parsed trace.json.
json traced_run(const std::string& name, int ranks, const std::string& layout) {
  const std::string dir = (fs::temp_directory_path() / ("loom_trace_" + name)).string();
  fs::remove_all(dir);
  const std::string cmd = loom::testing::mpirun(ranks) + LOOM_BINARY +
                          " train --data " LOOM_SOURCE_DIR "/data/tinyshakespeare.txt --n-layer 2 --n-head 2 --n-embd 16 "
                          "--block-size 16 --batch-size 2 --steps 5 --eval-batches 1 --threads 1 --peak-gflops 100 "
                          "--trace --trace-steps 2:3 --out-dir " + dir + " " + layout;
  const loom::testing::CommandResult r = loom::testing::run_command(cmd);
  EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  EXPECT_NE(r.output.find("wrote " + dir + "/trace.json (steps 2-3, " + std::to_string(ranks) + " ranks"), std::string::npos)
      << r.output;
  std::ifstream in(dir + "/trace.json");
  EXPECT_TRUE(in.good()) << "no trace.json in " << dir;
  return json::parse(in);  // throws (fails the test) on invalid JSON
}

struct Span {
  std::string cat, name;
  int64_t start, end;  // ns
  json args;
};

// X spans by (pid, tid), in file order; checks the process names on the way.
std::map<std::pair<int, int>, std::vector<Span>> spans_by_row(const json& trace, int ranks,
                                                              const std::vector<std::string>& process_names) {
  std::map<std::pair<int, int>, std::vector<Span>> rows;
  std::map<int, std::string> names;
  for (const json& e : trace.at("traceEvents")) {
    const int pid = e.at("pid");
    if (e.at("ph") == "M" && e.at("name") == "process_name") names[pid] = e.at("args").at("name");
    if (e.at("ph") != "X") continue;
    const auto us = [](const json& v) { return static_cast<int64_t>(std::llround(v.get<double>() * 1e3)); };
    rows[{pid, e.at("tid")}].push_back(
        {e.value("cat", ""), e.at("name"), us(e.at("ts")), us(e.at("ts")) + us(e.at("dur")), e.value("args", json())});
  }
  EXPECT_EQ(static_cast<int>(names.size()), ranks);
  for (int r = 0; r < ranks; ++r) EXPECT_EQ(names[r], process_names[static_cast<size_t>(r)]);
  return rows;
}

// On one thread row spans either nest or follow each other, never partly overlap.
void expect_nested(const std::vector<Span>& row, const std::string& where) {
  std::vector<Span> sorted = row;
  std::sort(sorted.begin(), sorted.end(),
            [](const Span& a, const Span& b) { return a.start != b.start ? a.start < b.start : a.end > b.end; });
  std::vector<const Span*> open;
  for (const Span& s : sorted) {
    while (!open.empty() && open.back()->end <= s.start) open.pop_back();
    if (!open.empty()) {
      EXPECT_LE(s.end, open.back()->end + 1)  // 1 ns: rounding of the microsecond times
          << where << ": '" << s.name << "' overlaps '" << open.back()->name << "' without nesting";
    }
    open.push_back(&s);
  }
}

int count(const std::vector<Span>& row, const std::string& cat, const std::string& name) {
  return static_cast<int>(std::count_if(row.begin(), row.end(),
                                        [&](const Span& s) { return s.cat == cat && (name.empty() || s.name == name); }));
}

TEST(TraceRun, DataParallelTwoRanks) {
  const json trace = traced_run("dp2", 2, "--dp 2 --bucket-mb 0.001");
  EXPECT_EQ(trace.at("otherData").at("layout"), "dp 2 x pp 1 x tp 1");
  auto rows = spans_by_row(trace, 2, {"rank 0 (dp 0, pp 0, tp 0)", "rank 1 (dp 1, pp 0, tp 0)"});
  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<Span>& compute = rows[{rank, 0}];
    const std::string where = "rank " + std::to_string(rank);
    EXPECT_EQ(count(compute, "step", "step"), 2) << where;  // steps 2 and 3
    for (const char* module : {"embedding", "blocks.0", "blocks.1", "blocks.1.mlp", "ln_f"}) {
      EXPECT_EQ(count(compute, "forward", module), 2) << where << " " << module;
      EXPECT_EQ(count(compute, "backward", module), 2) << where << " " << module;
    }
    EXPECT_EQ(count(compute, "loss", ""), 2) << where;
    EXPECT_EQ(count(compute, "optimizer", "optimizer step"), 2) << where;
    EXPECT_EQ(count(compute, "data", "load batch"), 2) << where;
    // The bucket all-reduces run on the communication thread's row, with bytes and algorithm.
    int all_reduces = 0;
    int64_t bytes = 0;
    for (const auto& [key, row] : rows) {
      if (key.first != rank || key.second == 0) continue;
      for (const Span& s : row)
        if (s.name == "all_reduce" && s.args.value("group", "") == "world") {
          ++all_reduces;
          bytes += s.args.at("bytes").get<int64_t>();
          EXPECT_EQ(s.args.at("algorithm"), "mpi");
        }
    }
    EXPECT_GT(all_reduces, 4) << where << ": several buckets per step";
    // Two steps of the whole gradient at least: 7888 parameters (wte 1040, wpe 256, 2 blocks of
    // 3280, ln_f 32) of 4 bytes.
    EXPECT_GE(bytes, 2 * 4 * 7888) << where;
    for (const auto& [key, row] : rows)
      if (key.first == rank) expect_nested(row, where + " thread " + std::to_string(key.second));
  }
  int counters = 0;
  for (const json& e : trace.at("traceEvents"))
    if (e.at("ph") == "C") {
      ++counters;
      EXPECT_TRUE(e.at("args").contains("params") && e.at("args").contains("activations")) << e;
    }
  EXPECT_GT(counters, 4);
}

TEST(TraceRun, PipelineTwoStages) {
  const json trace = traced_run("pp2", 2, "--pp 2 --micro-batches 2");
  auto rows = spans_by_row(trace, 2, {"rank 0 (dp 0, pp 0, tp 0)", "rank 1 (dp 0, pp 1, tp 0)"});
  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<Span>& compute = rows[{rank, 0}];
    const std::string where = "rank " + std::to_string(rank);
    // 2 steps x 2 micro-batches, a forward and a backward each, with the micro-batch index.
    EXPECT_EQ(count(compute, "pipeline", "F"), 4) << where;
    EXPECT_EQ(count(compute, "pipeline", "B"), 4) << where;
    std::set<int> mbs;
    for (const Span& s : compute)
      if (s.cat == "pipeline") mbs.insert(s.args.at("mb").get<int>());
    EXPECT_EQ(mbs, (std::set<int>{0, 1})) << where;
    EXPECT_EQ(count(compute, "forward", rank == 0 ? "embedding" : "ln_f"), 4) << where;
    EXPECT_EQ(count(compute, "forward", rank == 0 ? "ln_f" : "embedding"), 0) << where;
    // The first stage receives gradients, the last activations: 4 of each over two steps.
    const char* recv = rank == 0 ? "recv gradient" : "recv activation";
    EXPECT_EQ(count(compute, "p2p", recv), 4) << where;
    for (const Span& s : compute) {
      if (s.cat == "p2p") {
        EXPECT_EQ(s.args.at("bytes"), 2 * 16 * 16 * 4) << where << " " << s.name;
      }
    }
    for (const auto& [key, row] : rows)
      if (key.first == rank) expect_nested(row, where + " thread " + std::to_string(key.second));
  }
  // Sends are asynchronous spans: each begin has its end, the first stage sends activations.
  std::map<std::string, int> open;
  int activation_sends = 0;
  for (const json& e : trace.at("traceEvents")) {
    if (e.at("ph") == "b") {
      ++open[e.at("id")];
      activation_sends += e.at("pid") == 0 && e.at("name") == "send activation";
    }
    if (e.at("ph") == "e") --open[e.at("id")];
  }
  EXPECT_EQ(activation_sends, 4);
  for (const auto& [id, n] : open) EXPECT_EQ(n, 0) << "send " << id << " never ends";
}

}  // namespace
