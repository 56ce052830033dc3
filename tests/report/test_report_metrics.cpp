// The run report under hard inputs: values nested 100,000 deep are described, not dumped
// (dumping recursed off the stack); a failed write leaves the previous report.html whole and
// says why; a million-step run gives a bounded page (each line downsampled, its spikes
// kept); a resumed run's abandoned steps are dropped at its start record and every series
// runs in step order.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "loom/error.hpp"
#include "loom/report/charts.hpp"
#include "loom/report/json_values.hpp"
#include "loom/report/metrics.hpp"
#include "loom/report/run_report.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;

// A fresh run directory whose metrics.jsonl holds these lines (CTest runs cases in parallel).
fs::path run_dir(const std::string& name, const std::vector<std::string>& lines) {
  const fs::path dir = loom::testing::fresh_temp_dir("loom_report_" + name + "_" + std::to_string(::getpid()));
  std::ofstream out(dir / "metrics.jsonl");
  for (const std::string& l : lines) out << l << "\n";
  return dir;
}

std::string report_error(const fs::path& dir) {
  try {
    loom::report::run_report_html(dir.string());
  } catch (const loom::Error& e) {
    return e.what();
  }
  return "no error";
}

std::string nested(int depth) { return std::string(static_cast<size_t>(depth), '[') + std::string(static_cast<size_t>(depth), ']'); }

std::string train(int step, double loss) {
  return R"({"kind":"train","step":)" + std::to_string(step) + R"(,"loss":)" + std::to_string(loss) +
         R"(,"tokens_per_s":1000,"mfu":0.1})";
}

TEST(ReportMetrics, DeeplyNestedValuesAreDescribedNotDumped) {
  for (int depth : {1000, 10000, 100000}) {
    const std::string deep = nested(depth);
    fs::path dir = run_dir("deep", {deep});
    std::string m = report_error(dir);
    EXPECT_NE(m.find("metrics.jsonl line 1: expected a JSON object, got an array"), std::string::npos) << depth << ": " << m.substr(0, 300);
    dir = run_dir("deep", {train(1, 4.0), R"({"kind":"train","step":2,"loss":)" + deep + "}"});
    m = report_error(dir);
    EXPECT_NE(m.find("metrics.jsonl line 2: field 'loss' must be a number (or null), got an array"), std::string::npos)
        << depth << ": " << m.substr(0, 300);
    EXPECT_LT(m.size(), 300u);
    dir = run_dir("deep", {R"({"kind":"train","step":1,"moe_load":[1,)" + deep + "]}"});
    EXPECT_NE(report_error(dir).find("field 'moe_load' must be an array of numbers, got an array"), std::string::npos);
    dir = run_dir("deep", {R"({"kind":"train","step":{"a":)" + deep + "}}"});
    EXPECT_NE(report_error(dir).find("field 'step' must be a number, got an object"), std::string::npos);
    // memory.json and trace.json as deep: named with their file, nothing dumped.
    dir = run_dir("deep", {train(1, 4.0)});
    std::ofstream(dir / "memory.json") << deep;
    EXPECT_NE(report_error(dir).find("memory.json: a field is missing or has the wrong type"), std::string::npos);
    fs::remove(dir / "memory.json");
    std::ofstream(dir / "trace.json") << R"({"otherData":)" << deep << R"(,"traceEvents":[]})";
    EXPECT_NE(report_error(dir).find("trace.json: a field is missing or has the wrong type"), std::string::npos);
    fs::remove_all(dir);
  }
}

TEST(ReportMetrics, LongStringsAreCutInMessages) {
  const std::string mb(1000000, 'x');
  const fs::path dir = run_dir("long", {R"({"kind":"train","step":1,"loss":")" + mb + "\"}"});
  const std::string m = report_error(dir);
  EXPECT_NE(m.find("field 'loss' must be a number (or null), got \"" + std::string(40, 'x') + "...\" (a string of 1000000 bytes)"),
            std::string::npos)
      << m.substr(0, 300);
  EXPECT_LT(m.size(), 300u);
  // A key as long, and a cut that would split a character: at most the limit, whole characters.
  EXPECT_EQ(loom::report::brief("ab\xc3\xa9", 3), "ab...");
  EXPECT_EQ(loom::report::describe(nlohmann::json("\xc3\xa9" + std::string(50, 'y'))).substr(0, 4), "\"\xc3\xa9y");
  EXPECT_EQ(loom::report::describe(nlohmann::json(2.5)), "2.5");
  EXPECT_EQ(loom::report::describe(nlohmann::json(nullptr)), "null");
  fs::remove_all(dir);
}

// Written to a temporary file renamed over report.html when complete: a write that fails
// (here a file size limit, as a full disk would) leaves the previous report as it was, no
// temporary file behind, and the message names the file and the reason.
TEST(RunReport, AFailedWriteKeepsThePreviousReport) {
  const fs::path dir = run_dir("full", {train(1, 4.0), train(2, 3.5)});
  const fs::path html = dir / "report.html";
  std::ofstream(html) << "the previous report";
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // the limit applies to this process alone
    ::close(pipe_fds[0]);
    ::signal(SIGXFSZ, SIG_IGN);  // the write fails with EFBIG instead of killing the process
    const rlimit limit{1024, 1024};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    std::string message = "no error";
    try {
      loom::report::write_run_report(dir.string());
    } catch (const std::exception& e) {
      message = e.what();
    }
    (void)!::write(pipe_fds[1], message.data(), message.size());
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  std::string message;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0;) message.append(buf, static_cast<size_t>(n));
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_EQ(message, "cannot write '" + html.string() + "': File too large");
  EXPECT_EQ(loom::testing::read_file(html), "the previous report");
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) files.push_back(entry.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"metrics.jsonl", "report.html"}));
  // Without the limit the new report replaces it.
  EXPECT_EQ(loom::report::write_run_report(dir.string()), html.string());
  EXPECT_NE(loom::testing::read_file(html).find("<!DOCTYPE html>"), std::string::npos);
  fs::remove_all(dir);
}

TEST(ReportCharts, DownsampleKeepsEndsAndSpikes) {
  std::vector<std::pair<double, double>> points;
  for (int i = 0; i < 1000000; ++i) points.emplace_back(i, 1.0 + 1e-3 * (i % 7));
  points[123457].second = 50;   // a one-step spike up
  points[876543].second = -50;  // and down
  const auto kept = loom::report::downsample(points, 2000);
  EXPECT_LE(kept.size(), 2000u);
  EXPECT_GE(kept.size(), 1000u);
  EXPECT_EQ(kept.front(), points.front());
  EXPECT_EQ(kept.back(), points.back());
  for (size_t i = 1; i < kept.size(); ++i) ASSERT_LT(kept[i - 1].first, kept[i].first) << i;
  EXPECT_NE(std::find(kept.begin(), kept.end(), points[123457]), kept.end());
  EXPECT_NE(std::find(kept.begin(), kept.end(), points[876543]), kept.end());
  // Short series and uneven steps pass through or stay bounded.
  EXPECT_EQ(loom::report::downsample({{1, 1}, {2, 2}}, 2000).size(), 2u);
  std::vector<std::pair<double, double>> uneven;
  for (int i = 0; i < 10000; ++i) uneven.emplace_back(i < 9990 ? i : 1e9 + i, i);
  const auto u = loom::report::downsample(uneven, 100);
  EXPECT_LE(u.size(), 100u);
  EXPECT_EQ(u.back(), uneven.back());
}

// Values a chart's ticks could not advance through (1e17 + 16 is 1e17 plus a few ulps) or
// that overflow its range: a chart still comes out (the tick loops hung).
TEST(ReportCharts, ExtremeValuesEnd) {
  using loom::report::Series;
  EXPECT_NE(loom::report::line_chart("t", "x", "y", {Series{"s", "#000", {{1e17, 1}, {1e17 + 16, 2}}}}).find("</svg>"),
            std::string::npos);
  EXPECT_NE(loom::report::line_chart("t", "x", "y", {Series{"s", "#000", {{1, 1e16}, {2, 1e16 + 2}}}}).find("</svg>"),
            std::string::npos);
  EXPECT_NE(loom::report::line_chart("t", "x", "y", {Series{"s", "#000", {{-1.7e308, -1.7e308}, {1.7e308, 1.7e308}}}}).find("</svg>"),
            std::string::npos);
  EXPECT_NE(loom::report::stacked_bars("t", {{"r", {{"a", 1e308}, {"b", 1e308}}}}, {"#000"}, "MiB", 1 << 20).find("</svg>"),
            std::string::npos);
}

constexpr const char* kTrainLoss = "#4e79a7";  // the report's colour of the train loss line

// Point lists of html's polylines (those of one colour when given), in order.
std::vector<std::vector<std::pair<double, double>>> polylines(const std::string& html, const std::string& color = "") {
  std::vector<std::vector<std::pair<double, double>>> out;
  const std::string key = "<polyline fill=\"none\"" + (color.empty() ? "" : " stroke=\"" + color + "\"");
  for (size_t at = html.find(key); at != std::string::npos; at = html.find(key, at + 1)) {
    const size_t begin = html.find("points=\"", at) + 8, end = html.find('"', begin);
    std::istringstream in(html.substr(begin, end - begin));
    out.emplace_back();
    double x, y;
    char comma;
    while (in >> x >> comma >> y) out.back().emplace_back(x, y);
  }
  return out;
}

TEST(RunReport, AMillionStepRunGivesABoundedPage) {
  // 10^6 lines take seconds to parse; 200,000 show the bound as well.
  std::vector<std::string> lines;
  for (int s = 1; s <= 200000; ++s) lines.push_back(train(s, s == 77777 ? 40.0 : 3.0 + 1e-6 * s));
  const fs::path dir = run_dir("long_run", lines);
  const std::string html = loom::report::run_report_html(dir.string());
  EXPECT_LT(html.size(), 400000u);
  const auto lines_drawn = polylines(html);
  ASSERT_EQ(lines_drawn.size(), 3u);  // loss, tokens/s, MFU
  for (const auto& l : lines_drawn) EXPECT_LE(l.size(), loom::report::kMaxLinePoints);
  // The spike survives: the loss line's highest point (the smallest y in SVG) is far above the rest.
  const auto loss = polylines(html, kTrainLoss);
  ASSERT_EQ(loss.size(), 1u);
  double top = 1e9, second = 1e9;
  for (auto [x, y] : loss[0]) {
    if (y < top) second = top, top = y;
    else second = std::min(second, y);
  }
  EXPECT_GT(second - top, 100) << "the loss spike at step 77777 was lost";
  fs::remove_all(dir);
}

std::vector<double> steps_of(const loom::report::Metrics::Line& line) {
  std::vector<double> steps;
  for (const auto& [step, value] : line) steps.push_back(step);
  return steps;
}

std::vector<double> range(int from, int to) {
  std::vector<double> v;
  for (int s = from; s <= to; ++s) v.push_back(s);
  return v;
}

// The last line of a live run's metrics.jsonl may be half written, and a kill can leave one:
// without its '\n' and not JSON it is no record (as the trainer's next append treats it), and
// the page says it left it out. A line cut short anywhere else is still an error.
TEST(ReportMetrics, AHalfWrittenLastLineIsNoRecord) {
  const fs::path dir = run_dir("cut", {train(1, 4.0), train(2, 3.5)});
  std::ofstream(dir / "metrics.jsonl", std::ios::app) << R"({"kind":"train","step":3,"lo)";
  const auto m = loom::report::read_metrics((dir / "metrics.jsonl").string());
  EXPECT_EQ(steps_of(m.train_loss), range(1, 2));
  EXPECT_TRUE(m.last_line_cut);
  EXPECT_NE(loom::report::run_report_html(dir.string())
                .find("<p>Not drawn: the last line of metrics.jsonl, a record not yet complete (the run is writing "
                      "it, or was killed while it did).</p>"),
            std::string::npos);
  // Complete (a file written without a final '\n'): a record like the others.
  std::ofstream(dir / "metrics.jsonl", std::ios::app) << R"(ss":3.0})";
  EXPECT_EQ(steps_of(loom::report::read_metrics((dir / "metrics.jsonl").string()).train_loss), range(1, 3));
  // Cut before the last line: the file is damaged.
  const fs::path damaged = run_dir("cut_inside", {train(1, 4.0), R"({"kind":"train","step":2,"lo)", train(3, 3.0)});
  EXPECT_NE(report_error(damaged).find("metrics.jsonl line 2 is not JSON"), std::string::npos) << report_error(damaged);
  fs::remove_all(dir);
  fs::remove_all(damaged);
}

TEST(ReportMetrics, AStartRecordDropsTheAbandonedAttempt) {
  // Killed after step 20, resumed from the checkpoint of step 10: 11..20 logged twice.
  std::vector<std::string> lines{R"({"kind":"start","step":0})"};
  for (int s = 1; s <= 20; ++s) lines.push_back(train(s, 10.0 - 0.1 * s));
  lines.push_back(R"({"kind":"val","step":20,"val_loss":8.5})");  // of the lost attempt
  lines.push_back(R"({"kind":"val","step":10,"val_loss":9.5})");
  lines.push_back(R"({"kind":"start","step":10})");
  for (int s = 11; s <= 15; ++s) lines.push_back(train(s, 10.0 - 0.1 * s));
  const fs::path dir = run_dir("resumed", lines);
  const auto m = loom::report::read_metrics((dir / "metrics.jsonl").string());
  EXPECT_EQ(steps_of(m.train_loss), range(1, 15));
  EXPECT_EQ(steps_of(m.val_loss), std::vector<double>{10});
  // The chart: the train loss line through steps 1..15 once each, left to right.
  const std::string html = loom::report::run_report_html(dir.string());
  const auto drawn = polylines(html, kTrainLoss);
  ASSERT_EQ(drawn.size(), 1u);
  ASSERT_EQ(drawn[0].size(), 15u);
  for (size_t i = 1; i < drawn[0].size(); ++i) EXPECT_LT(drawn[0][i - 1].first, drawn[0][i].first) << i;
  EXPECT_NE(html.find("Final validation loss: <b>9.5000</b>"), std::string::npos);
  // The page says what it left out, and that the file keeps it.
  EXPECT_NE(html.find("<p>Not drawn: 11 train and val records (steps 11 to 20) that an earlier attempt logged past the "
                      "step a later run started from (a resume from an earlier checkpoint, or --resume auto starting "
                      "afresh); metrics.jsonl keeps them.</p>"),
            std::string::npos);

  // Resumed twice, the second time from further back: each start drops what came before it.
  std::vector<std::string> twice;
  for (int s = 1; s <= 20; ++s) twice.push_back(train(s, 1));
  twice.push_back(R"({"kind":"start","step":15})");
  for (int s = 16; s <= 18; ++s) twice.push_back(train(s, 1));
  twice.push_back(R"({"kind":"start","step":12})");
  for (int s = 13; s <= 14; ++s) twice.push_back(train(s, 1));
  EXPECT_EQ(steps_of(loom::report::read_metrics((run_dir("resumed", twice) / "metrics.jsonl").string()).train_loss), range(1, 14));

  // No start record (a file from before them): every record kept, in step order.
  std::vector<std::string> old;
  for (int s = 1; s <= 20; ++s) old.push_back(train(s, 1));
  for (int s = 11; s <= 15; ++s) old.push_back(train(s, 1));
  std::vector<double> want = range(1, 20);
  for (int s = 11; s <= 15; ++s) want.push_back(s);
  std::sort(want.begin(), want.end());
  EXPECT_EQ(steps_of(loom::report::read_metrics((run_dir("resumed", old) / "metrics.jsonl").string()).train_loss), want);
  // A start record is checked like the others.
  EXPECT_NE(report_error(run_dir("resumed", {train(1, 1), R"({"kind":"start"})"})).find("line 2: a start record without a 'step'"),
            std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
