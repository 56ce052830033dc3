#include "loom/report/run_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "loom/data/input_file.hpp"
#include "loom/data/output_file.hpp"
#include "loom/error.hpp"
#include "loom/parallel/pipeline/timeline_svg.hpp"
#include "loom/report/charts.hpp"
#include "loom/report/expert_load.hpp"
#include "loom/report/json_values.hpp"
#include "loom/report/metrics.hpp"
#include "loom/report/trace_summary.hpp"

namespace loom::report {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Tableau 10: the memory categories and time kinds keep their colour across charts.
const std::vector<std::string> kPalette{"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                        "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

constexpr const char* kStyle = R"(
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; color: #222;
       max-width: 1180px; margin: 24px auto; padding: 0 20px; background: #fafafa; }
h1 { font-size: 26px; margin-bottom: 4px; }
h2 { font-size: 19px; margin: 0 0 6px; }
p.lead { color: #555; margin-top: 0; }
section { background: white; border: 1px solid #e3e3e3; border-radius: 8px; padding: 16px 20px; margin: 16px 0; }
section p { margin: 4px 0 10px; color: #444; font-size: 14px; }
.row { display: flex; flex-wrap: wrap; gap: 12px; }
.scroll { overflow-x: auto; }
.fit svg { max-width: 100%; height: auto; }
.missing { color: #888; font-style: italic; }
svg.chart { background: white; }
svg .title { font-size: 14px; font-weight: 600; fill: #222; }
svg .tick { font-size: 11px; fill: #555; }
svg .label { font-size: 12px; fill: #333; }
svg .grid { stroke: #eee; }
svg .axis { stroke: #999; }
svg { font-family: system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; }
table { border-collapse: collapse; font-size: 13px; margin-top: 8px; }
td, th { border-bottom: 1px solid #eee; padding: 3px 10px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
)";

// memory.json and trace.json are read whole into a JSON tree, about ten times the file's size
// in memory: a trace of a few hundred steps of a large layout is far below this bound.
constexpr int64_t kMaxRunJsonBytes = int64_t{256} << 20;

std::optional<json> read_json(const fs::path& path) {
  if (data::file_kind(path.string()) != "missing") {
    const int64_t bytes = data::check_input_file(path.string(), "run file");
    check(bytes <= kMaxRunJsonBytes, "run file '", path.string(), "' is ", bytes >> 20,
          " MiB, more than the 256 MiB loom report reads (a trace of fewer steps: trace_steps)");
  }
  std::ifstream in(path);
  if (!in.good()) return std::nullopt;
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail(path.string(), " is not valid JSON: ", brief(e.what()));  // the parser quotes the token it read
  }
}

std::string section(const std::string& id, const std::string& title, const std::string& intro, const std::string& body) {
  return "<section id=\"" + id + "\">\n<h2>" + escape_xml(title) + "</h2>\n<p>" + intro + "</p>\n" + body + "</section>\n";
}

std::string missing(const std::string& text) { return "<p class=\"missing\">" + escape_xml(text) + "</p>\n"; }

std::string fixed(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// What read_metrics left out of metrics.jsonl: the page says so, since the file keeps it.
std::string left_out_note(const Metrics& metrics) {
  std::string note;
  if (metrics.abandoned > 0) {
    char steps[96];
    std::snprintf(steps, sizeof steps, "%.15g to %.15g", metrics.abandoned_first, metrics.abandoned_last);
    note += "<p>Not drawn: " + std::to_string(metrics.abandoned) + " train and val record" +
            (metrics.abandoned == 1 ? "" : "s") + " (steps " + steps +
            ") that an earlier attempt logged past the step a later run started from (a resume from an earlier "
            "checkpoint, or --resume auto starting afresh); metrics.jsonl keeps them.</p>\n";
  }
  if (metrics.last_line_cut)
    note += "<p>Not drawn: the last line of metrics.jsonl, a record not yet complete (the run is writing it, or "
            "was killed while it did).</p>\n";
  return note;
}

std::string loss_section(const Metrics& metrics) {
  const Series train{"train loss", kPalette[0], metrics.train_loss}, val{"val loss", kPalette[1], metrics.val_loss};
  if (train.points.empty() && val.points.empty())
    return section("loss", "Loss", "", missing("No loss records in metrics.jsonl.") + left_out_note(metrics));
  std::string intro = "Cross-entropy in nats per token, as logged every log_every steps (train) and at each evaluation (val).";
  if (!val.points.empty())  // the last point survives downsampling
    intro += " Final validation loss: <b>" + fixed(val.points.back().second, 4) + "</b>.";
  return section("loss", "Loss", intro, left_out_note(metrics) + line_chart("loss", "step", "nats / token", {train, val}));
}

std::string throughput_section(const Metrics& metrics) {
  if (metrics.tokens_per_s.empty())
    return section("throughput", "Throughput", "", missing("No throughput records in metrics.jsonl."));
  const Series tokens{"tokens/s", kPalette[4], metrics.tokens_per_s}, mfu{"MFU", kPalette[6], metrics.mfu_percent};
  return section("throughput", "Throughput",
                 "Tokens of the global batch per second of the logged step, and model FLOPs utilisation against the "
                 "measured matmul peak of all the job's processes.",
                 "<div class=\"row\">" + line_chart("tokens per second", "step", "tokens / s", {tokens}) +
                     line_chart("model FLOPs utilisation", "step", "MFU (%)", {mfu}) + "</div>\n");
}

std::string memory_section(const std::optional<json>& memory) {
  if (!memory) return section("memory", "Memory per rank", "", missing("No memory.json in this run directory (written at the end of a run)."));
  std::vector<Bar> bars;
  std::ostringstream table;
  table << "<table><tr><th>rank</th><th>params</th><th>grads</th><th>optimizer</th><th>peak activations</th>"
           "<th>peak comm</th><th>peak total</th><th>formula (state + activations + data)</th></tr>\n";
  // Doubles throughout: a damaged 1e300 read as an integer would overflow.
  auto mib = [](double b) { return fixed(b / (1 << 20), 2); };
  size_t i = 0;
  for (const json& r : memory->at("ranks")) {
    const json &cur = r.at("current"), &peak = r.at("peak"), &f = r.at("formula");
    const int64_t rank = integer_field(r.at("rank"), 0, std::numeric_limits<int>::max(), "ranks[" + std::to_string(i++) + "]", "rank");
    const std::string name = r.value("name", "rank " + std::to_string(rank));
    bars.push_back({name + " measured",
                    {{"params", cur.value("params", 0.0)}, {"grads", cur.value("grads", 0.0)}, {"optimizer", cur.value("optim", 0.0)},
                     {"activations", peak.value("activations", 0.0)}, {"comm buffers", peak.value("comm", 0.0)},
                     {"gathered", peak.value("gathered", 0.0)}, {"other", peak.value("other", 0.0)}}});
    bars.push_back({"formula", {{"params", f.value("params", 0.0)}, {"grads", f.value("grads", 0.0)},
                                {"optimizer", f.value("optimizer", 0.0)}, {"activations", f.value("activations", 0.0)},
                                {"data", f.value("data", 0.0)}, {"gathered", f.value("gathered", 0.0)}}});
    table << "<tr><td>" << escape_xml(name) << "</td><td>" << mib(cur.value("params", 0.0)) << "</td><td>"
          << mib(cur.value("grads", 0.0)) << "</td><td>" << mib(cur.value("optim", 0.0)) << "</td><td>"
          << mib(peak.value("activations", 0.0)) << "</td><td>" << mib(peak.value("comm", 0.0)) << "</td><td>"
          << mib(r.value("total_peak", 0.0)) << "</td><td>"
          << mib(f.value("params", 0.0) + f.value("grads", 0.0) + f.value("optimizer", 0.0) + f.value("activations", 0.0) +
                 f.value("data", 0.0))
          << "</td></tr>\n";
  }
  table << "</table>\n";
  return section("memory", "Memory per rank",
                 "Each rank's tensors by category (model state held at the end of the run, peaks of the rest) next to "
                 "the prediction: the ZeRO formula for parameters, gradients and optimizer state, and activations per "
                 "layer (Korthikanti et al. for Loom's fp32 layers) times the layers and micro-batches the rank holds, "
                 "and the input data the model holds beside its batches (a GCN's graph). MiB.",
                 "<div class=\"scroll\">" + stacked_bars("memory by category", bars, kPalette, "MiB", 1 << 20) + "</div>\n" +
                     table.str());
}

std::string pipeline_section(const std::optional<json>& trace) {
  if (!trace) return section("pipeline", "Pipeline timeline", "", missing("No trace.json: run with --trace to record one."));
  const auto t = pipeline_timeline(*trace);
  if (!t) return section("pipeline", "Pipeline timeline", "", missing("No pipeline in this run (pp = 1)."));
  const double bubble = t->bubble_over_compute();
  return section("pipeline", "Pipeline timeline",
                 "The last traced step of data-parallel replica 0 as it ran: one row per stage, forwards (blue) and "
                 "backwards (orange) labelled with their micro-batch; the gaps are the bubble, <b>" +
                     fixed(100 * bubble, 0) + "%</b> of compute time here. Time in ms.",
                 "<div class=\"fit\">" +
                     parallel::pipeline::timeline_svg(*t, "pp " + std::to_string(t->pp) + ", " +
                                                              std::to_string(t->micro_batches) + " micro-batches, " +
                                                              std::to_string(t->chunks) + " chunk(s) per rank (ms)",
                                                      /*max_plot_px=*/1000) +
                     "</div>\n");
}

std::string comm_section(const std::optional<json>& trace, const Metrics& metrics) {
  if (!trace) return section("comm", "Communication and computation", "", missing("No trace.json: run with --trace to record one."));
  const std::vector<RankTime> ranks = rank_times(*trace);
  std::vector<Bar> bars;
  std::ostringstream table;
  table << "<table><tr><th>rank</th><th>compute (ms)</th><th>communication (ms)</th><th>overlapped</th><th>traced "
           "window (ms)</th></tr>\n";
  for (const RankTime& r : ranks) {
    bars.push_back({r.name, {{"compute only", r.compute_s - r.overlapped_s}, {"communication overlapped with compute", r.overlapped_s},
                             {"communication exposed", r.comm_s - r.overlapped_s}}});
    table << "<tr><td>" << escape_xml(r.name) << "</td><td>" << fixed(1e3 * r.compute_s, 2) << "</td><td>"
          << fixed(1e3 * r.comm_s, 2) << "</td><td>" << (r.comm_s > 0 ? fixed(100 * r.overlapped_s / r.comm_s, 0) + "%" : "-")
          << "</td><td>" << fixed(1e3 * r.window_s, 2) << "</td></tr>\n";
  }
  table << "</table>\n";
  const double comm_s = metrics.comm_s, exposed_s = metrics.comm_exposed_s;
  std::string intro = "From the trace's steps: time each rank computed (forward, backward, loss, optimizer, data; "
                      "waits excluded) and communicated (collectives on the communication threads, pipeline receives), "
                      "and the part of the communication that ran while the rank computed. A pipeline stage waiting "
                      "for its neighbour's activation or gradient counts as exposed communication: that is the bubble.";
  if (comm_s > 0)
    intro += " Over the logged steps the data-parallel gradient reduction took " + fixed(1e3 * comm_s, 1) + " ms, " +
             fixed(100 * std::max(0.0, 1 - exposed_s / comm_s), 0) + "% of it hidden behind backward.";
  return section("comm", "Communication and computation", intro,
                 "<div class=\"scroll\">" +
                     stacked_bars("time per rank in the traced steps", bars, {kPalette[0], kPalette[4], kPalette[2]}, "ms", 1e-3) +
                     "</div>\n" + table.str());
}

// A mixture of experts' routing; no section for a dense model.
std::string experts_section(const Metrics& metrics) {
  const std::string chart = expert_load_chart(metrics, kPalette);
  if (chart.empty()) return "";
  return section("experts", "Mixture of experts",
                 "Each expert's share of the routed assignments (tokens x top-k kept after capacity, summed over the "
                 "MoE layers) per logged step; balanced, every expert carries 100 / E %.", chart);
}

// make() reading file, a JSON file as loom train writes it: a missing field or one of another
// type is the file's damage, named with it (not an internal error).
template <class F>
std::string reading(const fs::path& file, const F& make) {
  try {
    return make();
  } catch (const json::exception& e) {
    fail(file.string(), ": a field is missing or has the wrong type: ", brief(e.what()));
  } catch (const FieldError& e) {  // an id or index out of its range, named where it is
    fail(file.string(), ": ", e.what());
  }
}

}  // namespace

std::string run_report_html(const std::string& run_dir) {
  const fs::path dir(run_dir);
  const Metrics metrics = read_metrics((dir / "metrics.jsonl").string());
  const std::optional<json> memory = read_json(dir / "memory.json"), trace = read_json(dir / "trace.json");
  const fs::path trace_file = dir / "trace.json";
  std::string layout;
  if (trace && trace->contains("otherData"))
    layout = reading(trace_file, [&] {
      return " | " + trace->at("otherData").value("layout", "") + ", steps " +
             trace->at("otherData").value("trace_steps", "") + " traced";
    });
  std::ostringstream os;
  os << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>Loom run report: "
     << escape_xml(dir.filename().string()) << "</title>\n<style>" << kStyle << "</style>\n</head>\n<body>\n"
     << "<h1>Loom run report</h1>\n<p class=\"lead\">" << escape_xml(fs::absolute(dir).lexically_normal().string())
     << escape_xml(layout) << "</p>\n"
     << loss_section(metrics) << throughput_section(metrics)
     << reading(dir / "memory.json", [&] { return memory_section(memory); })
     << reading(trace_file, [&] { return pipeline_section(trace); })
     << reading(trace_file, [&] { return comm_section(trace, metrics); }) << experts_section(metrics)
     << "</body>\n</html>\n";
  return os.str();
}

std::string write_run_report(const std::string& run_dir) {
  const std::string html = run_report_html(run_dir);
  const std::string path = (fs::path(run_dir) / "report.html").string();
  // A temporary file renamed over report.html once complete: a full disk leaves the last
  // report as it was, and the message says why (strerror).
  data::write_file_atomically(path, html);
  return path;
}

}  // namespace loom::report
