// The run report: communication/computation overlap and the pipeline timeline computed from
// a hand-made trace; `loom report` on a real 2-stage pipeline run (with --trace) renders in
// headless Chromium with every section present, an SVG in each, and no script or console
// errors; its screenshot is what docs/report.png shows. Chromium missing is a failure.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "loom/error.hpp"
#include "loom/report/json_values.hpp"
#include "loom/report/run_report.hpp"
#include "loom/report/trace_summary.hpp"
#include "run_command.hpp"
#include "test_util.hpp"

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const char* const kSections[] = {"loss", "throughput", "memory", "pipeline", "comm"};

json span(json pid, json tid, const std::string& cat, const std::string& name, double ts_us, double dur_us, json args = {}) {
  json e{{"ph", "X"}, {"pid", pid}, {"tid", tid}, {"cat", cat}, {"name", name}, {"ts", ts_us}, {"dur", dur_us}};
  if (!args.is_null()) e["args"] = args;
  return e;
}

json process(int pid, const std::string& name) {
  return {{"ph", "M"}, {"pid", pid}, {"tid", 0}, {"name", "process_name"}, {"args", {{"name", name}}}};
}

TEST(TraceSummary, ComputeCommunicationAndOverlap) {
  // Rank 0 computes 0-100 us with a 20 us wait inside (60-80, for the all-reduce running
  // 50-80 on its communication thread), then communicates 120-130 alone: 40 us of
  // communication, of which 50-60 overlaps compute (10 us).
  json trace{{"traceEvents",
              {process(0, "rank 0 (dp 0, pp 0, tp 0)"), span(0, 0, "step", "step", 0, 140),
               span(0, 0, "backward", "blocks.0", 0, 100), span(0, 0, "backward", "blocks.0.mlp", 10, 30),
               span(0, 0, "wait", "all_reduce #3", 60, 20), span(0, 1, "comm", "all_reduce", 50, 30),
               span(0, 1, "comm", "all_reduce", 120, 10)}}};
  const auto ranks = loom::report::rank_times(trace);
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_NEAR(ranks[0].compute_s, 80e-6, 1e-12);
  EXPECT_NEAR(ranks[0].comm_s, 40e-6, 1e-12);
  EXPECT_NEAR(ranks[0].overlapped_s, 10e-6, 1e-12);
  EXPECT_NEAR(ranks[0].window_s, 140e-6, 1e-12);
}

TEST(TraceSummary, PipelineTimelineOfTheLastStep) {
  auto box = [](int pid, const char* kind, int mb, double ts, double dur) {
    return span(pid, 0, "pipeline", kind, ts, dur, {{"mb", mb}, {"chunk", 0}});
  };
  json trace{{"traceEvents",
              {process(0, "rank 0 (dp 0, pp 0, tp 0)"), process(1, "rank 1 (dp 0, pp 1, tp 0)"),
               process(2, "rank 2 (dp 1, pp 0, tp 0)"), span(0, 0, "step", "step", 0, 100), box(0, "F", 0, 10, 10),
               span(0, 0, "step", "step", 1000, 100), box(0, "F", 0, 1000, 10), box(0, "B", 0, 1050, 20),
               span(1, 0, "step", "step", 1000, 100), box(1, "F", 0, 1010, 10), box(1, "B", 0, 1020, 20),
               span(2, 0, "step", "step", 1000, 100), box(2, "F", 0, 1000, 10)}}};
  const auto t = loom::report::pipeline_timeline(trace);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->pp, 2);  // replica 1's rank 2 is not drawn
  ASSERT_EQ(t->ranks[0].size(), 2u);  // the first step's forward is not in the last step
  ASSERT_EQ(t->ranks[1].size(), 2u);
  EXPECT_NEAR(t->ranks[0][1].start, 0.050, 1e-9);  // ms from the first compute
  EXPECT_NEAR(t->ranks[1][1].end, 0.040, 1e-9);
  EXPECT_FALSE(loom::report::pipeline_timeline(json{{"traceEvents", json::array({process(0, "rank 0 (dp 0, pp 0, tp 0)")})}}));
}

// Under a 3D grid (and a split sequence) the stage's first rank is the one whose every other
// coordinate is 0: a grid's row 1 or a cp rank 1 is not drawn as a stage of its own (a grid's
// names once ended in "tp <depth>", which this parse took for tp).
TEST(TraceSummary, PipelineTimelineTakesOneRankAStageOfAGridOrARing) {
  auto box = [](int pid, const char* kind, double ts) {
    return span(pid, 0, "pipeline", kind, ts, 10, {{"mb", 0}, {"chunk", 0}});
  };
  for (const std::string& other : {", depth 0, row %, col 0)", ", cp %, tp 0)"}) {
    auto name = [&](int rank, int stage, int second) {
      std::string tail = other;
      tail.replace(tail.find('%'), 1, std::to_string(second));
      return "rank " + std::to_string(rank) + " (dp 0, pp " + std::to_string(stage) + tail;
    };
    json events = json::array();
    for (int rank = 0; rank < 4; ++rank) {
      events.push_back(process(rank, name(rank, rank / 2, rank % 2)));
      events.push_back(span(rank, 0, "step", "step", 0, 100));
      events.push_back(box(rank, "F", 10 * rank));
    }
    const auto t = loom::report::pipeline_timeline(json{{"traceEvents", events}});
    ASSERT_TRUE(t.has_value()) << other;
    EXPECT_EQ(t->pp, 2) << other;
    ASSERT_EQ(t->ranks[0].size(), 1u) << other << ": rank 0 alone draws stage 0";
    ASSERT_EQ(t->ranks[1].size(), 1u) << other << ": rank 2 alone draws stage 1";
    EXPECT_NEAR(t->ranks[1][0].start, 0.020, 1e-9) << other;
  }
}

// Ids and indices that are no int (1e300 converted to int is undefined; -1 indexed the
// pipeline picture's colours, a pp stage of -3 its rows and crashed it, one of 99999999 made
// as many rows) are refused naming the event and field; "NaN" and 3.5 as well, and 3.0 is 3.
TEST(TraceSummary, IdsThatAreNoIndexAreRefusedByName) {
  auto trace = [](json pid, json tid, json mb, json chunk, const std::string& stage = "0") {
    return json{{"traceEvents",
                 {process(0, "rank 0 (dp 0, pp " + stage + ", tp 0)"), process(1, "rank 1 (dp 0, pp 1, tp 0)"),
                  span(pid, tid, "step", "step", 0, 100), span(0, 0, "pipeline", "F", 10, 10, {{"mb", mb}, {"chunk", chunk}})}}};
  };
  auto error = [](const json& t) {
    try {
      loom::report::rank_times(t);
      loom::report::pipeline_timeline(t);
    } catch (const loom::report::FieldError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  for (const json& bad : {json(1e300), json(-1), json(3.5), json("NaN"), json(4294967296)}) {
    const std::string got = " must be an integer from 0 to 2147483646, got " + loom::report::describe(bad);
    EXPECT_EQ(error(trace(bad, 0, 0, 0)), "traceEvents[2]: field 'pid'" + got);
    EXPECT_EQ(error(trace(0, bad, 0, 0)), "traceEvents[2]: field 'tid'" + got);
    EXPECT_EQ(error(trace(0, 0, bad, 0)), "traceEvents[3]: field 'args.mb'" + got);
    EXPECT_EQ(error(trace(0, 0, 0, bad)), "traceEvents[3]: field 'args.chunk'" + got);
  }
  for (const char* stage : {"-3", "99999999", "2", "x"})
    EXPECT_EQ(error(trace(0, 0, 0, 0, stage)), "process name 'rank 0 (dp 0, pp " + std::string(stage) +
                                                   ", tp 0)': the pp stage must be an integer below 2, the processes the trace names");
  EXPECT_EQ(error(trace(0, 0, 3.0, 0)), "no error");
  EXPECT_EQ(loom::report::pipeline_timeline(trace(0, 0, 3.0, 0))->micro_batches, 4);
}

TEST(RunReport, MissingRunDirectoryIsAClearError) {
  try {
    loom::report::run_report_html("/nonexistent/run");
    FAIL();
  } catch (const loom::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no metrics.jsonl in '/nonexistent/run'"), std::string::npos) << e.what();
  }
}

TEST(RunReport, SectionsWithoutDataSaySo) {
  const fs::path dir = fs::temp_directory_path() / "loom_report_metrics_only";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "metrics.jsonl") << R"({"kind":"train","step":1,"loss":4.2,"tokens_per_s":1000,"mfu":0.1})" << "\n"
                                        << R"({"kind":"train","step":2,"loss":3.9,"tokens_per_s":1100,"mfu":0.11})" << "\n"
                                        << R"({"kind":"val","step":2,"val_loss":3.95})" << "\n";
  const std::string html = loom::report::run_report_html(dir.string());
  for (const char* id : kSections) EXPECT_NE(html.find(std::string("<section id=\"") + id + "\""), std::string::npos) << id;
  EXPECT_NE(html.find("Final validation loss: <b>3.9500</b>"), std::string::npos);
  EXPECT_NE(html.find("No memory.json in this run directory"), std::string::npos);
  EXPECT_NE(html.find("<h2>Pipeline timeline</h2>\n<p></p>\n<p class=\"missing\">No trace.json: run with --trace"),
            std::string::npos);
  // A trace without pipeline spans: the pipeline section says there is none.
  std::ofstream(dir / "trace.json")
      << R"j({"traceEvents":[{"ph":"M","pid":0,"tid":0,"name":"process_name","args":{"name":"rank 0 (dp 0, pp 0, tp 0)"}}]})j";
  EXPECT_NE(loom::report::run_report_html(dir.string()).find("No pipeline in this run (pp = 1)."), std::string::npos);
}

// memory.json's rank as trace.json's ids: an integer from 0, named with the file and rank entry.
TEST(RunReport, AMemoryRankThatIsNoIndexIsRefusedByName) {
  const fs::path dir = loom::testing::fresh_temp_dir("loom_report_memory_rank_" + std::to_string(::getpid()));
  std::ofstream(dir / "metrics.jsonl") << R"({"kind":"train","step":1,"loss":4.2})" << "\n";
  for (const char* bad : {"1e300", "-1", "3.5", "\"NaN\"", "2147483648"}) {
    std::ofstream(dir / "memory.json") << R"({"ranks": [{"rank": 0, "current": {}, "peak": {}, "formula": {}},)"
                                       << R"( {"rank": )" << bad << R"(, "current": {}, "peak": {}, "formula": {}}]})";
    try {
      loom::report::run_report_html(dir.string());
      ADD_FAILURE() << bad << ": no error";
    } catch (const loom::Error& e) {
      EXPECT_EQ(std::string(e.what()), (dir / "memory.json").string() +
                                           ": ranks[1]: field 'rank' must be an integer from 0 to 2147483647, got " +
                                           loom::report::describe(json::parse(bad)));
    }
  }
  fs::remove_all(dir);
}

TEST(RunReport, ExpertLoadChartFromMoeMetrics) {
  // A unique directory: CTest runs cases in parallel.
  const fs::path dir = fs::temp_directory_path() / ("loom_report_moe_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "metrics.jsonl")
      << R"({"kind":"train","step":1,"loss":4.2,"moe_load":[30,10,0,0],"moe_load_imbalance":3.0})" << "\n"
      << R"({"kind":"train","step":2,"loss":4.0,"moe_load":[10,10,10,10],"moe_load_imbalance":1.0})" << "\n";
  const std::string html = loom::report::run_report_html(dir.string());
  const size_t at = html.find("<section id=\"experts\"");
  ASSERT_NE(at, std::string::npos);
  const std::string experts = html.substr(at);
  for (const char* name : {"expert 0", "expert 3", "max / mean", "load per expert"})
    EXPECT_NE(experts.find(name), std::string::npos) << name;
  // One line per expert and the imbalance line, each through both steps.
  size_t lines = 0;
  for (size_t i = experts.find("<polyline"); i != std::string::npos; i = experts.find("<polyline", i + 1)) ++lines;
  EXPECT_EQ(lines, 5u);
  // A dense run has no experts section.
  std::ofstream(dir / "metrics.jsonl") << R"({"kind":"train","step":1,"loss":4.2})" << "\n";
  EXPECT_EQ(loom::report::run_report_html(dir.string()).find("id=\"experts\""), std::string::npos);
  fs::remove_all(dir);
}

// Headless Chromium: `what` is --dump-dom or --screenshot=...; console messages on stderr.
loom::testing::CommandResult chromium(const std::string& what, const std::string& url, const std::string& profile) {
  return loom::testing::run_command(
      "chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking "
      "--disable-component-update --disable-sync --enable-logging=stderr --v=0 --user-data-dir=" + profile +
      " --window-size=1280,2400 " + what + " " + url);
}

// Chromium logs page messages as "...:INFO:CONSOLE:1] \"Uncaught ReferenceError: ...\"" (or
// ERROR:CONSOLE); the report has no script, so any console message at all is a fault.
bool has_console_error(const std::string& output) {
  return output.find("Uncaught") != std::string::npos || output.find(":CONSOLE") != std::string::npos;
}

TEST(RunReport, RendersInHeadlessChromium) {
  const loom::testing::CommandResult which = loom::testing::run_command("command -v chromium");
  ASSERT_EQ(which.exit_code, 0) << "chromium is not installed: run scripts/install-deps.sh (it installs Debian's "
                                   "chromium, which renders the report in this test)";
  const fs::path dir = fs::temp_directory_path() / "loom_report_run";
  fs::remove_all(dir);
  // A small demo-like run: 2 pipeline stages, 4 micro-batches, a traced window.
  const std::string train = loom::testing::mpirun(2) + LOOM_BINARY +
                            " train --data " LOOM_SOURCE_DIR "/data/tinyshakespeare.txt --pp 2 --micro-batches 4 "
                            "--n-layer 4 --n-head 4 --n-embd 64 --block-size 64 --batch-size 4 --steps 30 --log-every 2 "
                            "--eval-every 10 --eval-batches 2 --warmup-steps 5 --threads 1 --peak-gflops 20 --trace "
                            "--trace-steps 20:21 --out-dir " + dir.string();
  const loom::testing::CommandResult run = loom::testing::run_command(train);
  ASSERT_EQ(run.exit_code, 0) << train << "\n" << run.output;
  const loom::testing::CommandResult report = loom::testing::run_command(std::string(LOOM_BINARY) + " report " + dir.string());
  ASSERT_EQ(report.exit_code, 0) << report.output;
  const std::string html_path = (dir / "report.html").string();
  const std::string html = loom::testing::read_file(html_path);
  // Self-contained: nothing to fetch, nothing to run.
  for (const char* outside : {"<script", "src=", "href=", "@import", "url("})
    EXPECT_EQ(html.find(outside), std::string::npos) << "report.html contains '" << outside << "'";

  const std::string profile = (dir / "chromium-profile").string();
  const loom::testing::CommandResult dom = chromium("--dump-dom", "file://" + html_path, profile);
  ASSERT_EQ(dom.exit_code, 0) << dom.output;
  EXPECT_FALSE(has_console_error(dom.output)) << dom.output;
  for (const char* id : kSections) {
    const size_t at = dom.output.find(std::string("<section id=\"") + id + "\"");
    ASSERT_NE(at, std::string::npos) << "section '" << id << "' missing from the rendered page";
    const size_t end = dom.output.find("</section>", at);
    EXPECT_NE(dom.output.substr(at, end - at).find("<svg"), std::string::npos) << "no picture in section '" << id << "'";
  }
  const std::string png = (dir / "report.png").string();
  const loom::testing::CommandResult shot = chromium("--screenshot=" + png, "file://" + html_path, profile);
  ASSERT_EQ(shot.exit_code, 0) << shot.output;
  EXPECT_FALSE(has_console_error(shot.output)) << shot.output;
  const std::string image = loom::testing::read_file(png);
  ASSERT_GT(image.size(), 20000u) << "screenshot " << png << " is nearly empty";
  EXPECT_EQ(image.substr(1, 3), "PNG");
  std::printf("report screenshot: %s\n", png.c_str());
}

// The console check above must be able to fail: a page with a script error trips it.
TEST(RunReport, ConsoleErrorsAreDetected) {
  const fs::path dir = fs::temp_directory_path() / "loom_report_broken";
  fs::create_directories(dir);
  std::ofstream((dir / "broken.html").string()) << "<!DOCTYPE html><html><body><script>undefined_function();</script></body></html>";
  const loom::testing::CommandResult dom =
      chromium("--dump-dom", "file://" + (dir / "broken.html").string(), (dir / "profile").string());
  EXPECT_TRUE(has_console_error(dom.output)) << dom.output;
}

}  // namespace
