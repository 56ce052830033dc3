#include "loom/report/trace_summary.hpp"

#include <algorithm>
#include <cctype>
#include <limits>
#include <map>
#include <set>

#include "loom/report/json_values.hpp"

namespace loom::report {

namespace {

using nlohmann::json;
using Intervals = std::vector<std::pair<double, double>>;  // seconds, sorted, disjoint after merge

Intervals merged(Intervals v) {
  std::sort(v.begin(), v.end());
  Intervals out;
  for (auto [a, b] : v) {
    if (!out.empty() && a <= out.back().second)
      out.back().second = std::max(out.back().second, b);
    else
      out.emplace_back(a, b);
  }
  return out;
}

double length(const Intervals& v) {
  double s = 0;
  for (auto [a, b] : v) s += b - a;
  return s;
}

// a and b merged; intersect keeps what lies in both, subtract what lies in a only.
Intervals combine(const Intervals& a, const Intervals& b, bool intersect) {
  Intervals out;
  size_t j = 0;
  for (auto [s, e] : a) {
    double at = s;
    while (j < b.size() && b[j].second <= s) ++j;
    for (size_t k = j; k < b.size() && b[k].first < e; ++k) {
      const double bs = std::max(b[k].first, s), be = std::min(b[k].second, e);
      if (intersect)
        out.emplace_back(bs, be);
      else if (bs > at)
        out.emplace_back(at, bs);
      at = std::max(at, be);
    }
    if (!intersect && at < e) out.emplace_back(at, e);
  }
  return out;
}

struct ParsedSpan {
  int pid, tid;
  std::string cat, name;
  double start, end;  // seconds
  const json* event;
  size_t index;  // in traceEvents
};

std::string event_at(size_t i) { return "traceEvents[" + std::to_string(i) + "]"; }

// An event's process or thread id, or an index in its args; below int's top, so that a count
// (the index + 1) fits too.
int event_int(const json& value, size_t i, const char* name) {
  return static_cast<int>(integer_field(value, 0, std::numeric_limits<int>::max() - 1, event_at(i), name));
}

std::vector<ParsedSpan> spans(const json& trace) {
  std::vector<ParsedSpan> out;
  size_t i = 0;
  for (const json& e : trace.at("traceEvents")) {
    if (e.value("ph", "") == "X") {
      const double ts = e.at("ts").get<double>() * 1e-6;
      out.push_back({event_int(e.at("pid"), i, "pid"), event_int(e.at("tid"), i, "tid"), e.value("cat", ""),
                     e.value("name", ""), ts, ts + e.at("dur").get<double>() * 1e-6, &e, i});
    }
    ++i;
  }
  return out;
}

std::map<int, std::string> process_names(const json& trace) {
  std::map<int, std::string> names;
  size_t i = 0;
  for (const json& e : trace.at("traceEvents")) {
    if (e.value("ph", "") == "M" && e.value("name", "") == "process_name")
      names[event_int(e.at("pid"), i, "pid")] = e.at("args").at("name");
    ++i;
  }
  return names;
}

// The pp stage a process name gives ("rank 3 (dp 0, pp 1, tp 0)", digits from `at`): a
// pipeline of S stages has S processes at least, so a larger stage is a damaged name (and
// would size the picture by it).
int pp_stage(const std::string& name, size_t at, size_t processes) {
  size_t end = at;
  while (end < name.size() && end - at < 10 && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
  const int64_t stage = end > at ? std::stoll(name.substr(at, end - at)) : -1;
  if (stage < 0 || stage >= static_cast<int64_t>(processes))
    throw FieldError("process name '" + brief(name, 80) + "': the pp stage must be an integer below " +
                     std::to_string(processes) + ", the processes the trace names");
  return static_cast<int>(stage);
}

// Whether every coordinate after the pp stage of a process name (its text from `after_stage`) is
// 0: ", tp 0)", ", cp 0, tp 0)", a grid's ", depth 0, row 0, col 0)": the first rank of its stage.
bool first_of_its_stage(const std::string& name, size_t after_stage) {
  size_t i = name.find_first_of(",)", after_stage);
  while (i != std::string::npos && i < name.size() && name[i] == ',') {
    const size_t space = name.find(' ', i + 2);  // after the axis's name
    if (space == std::string::npos || (name.compare(space, 3, " 0,") != 0 && name.compare(space, 3, " 0)") != 0))
      return false;
    i = space + 2;
  }
  return i != std::string::npos && i + 1 == name.size() && name[i] == ')';
}

}  // namespace

std::vector<RankTime> rank_times(const json& trace) {
  static const std::set<std::string> kCompute{"forward", "backward", "loss", "optimizer", "data", "pipeline"};
  std::map<int, Intervals> compute, waits, comm;
  std::map<int, std::pair<double, double>> window;
  for (const ParsedSpan& s : spans(trace)) {
    auto& w = window.try_emplace(s.pid, s.start, s.end).first->second;
    w = {std::min(w.first, s.start), std::max(w.second, s.end)};
    if (s.tid != 0) {
      comm[s.pid].emplace_back(s.start, s.end);
    } else if (s.cat == "p2p") {
      comm[s.pid].emplace_back(s.start, s.end);
      waits[s.pid].emplace_back(s.start, s.end);
    } else if (s.cat == "wait") {
      waits[s.pid].emplace_back(s.start, s.end);
    } else if (kCompute.count(s.cat) != 0) {
      compute[s.pid].emplace_back(s.start, s.end);
    }
  }
  std::vector<RankTime> out;
  for (const auto& [pid, name] : process_names(trace)) {
    const Intervals busy = combine(merged(compute[pid]), merged(waits[pid]), /*intersect=*/false);
    const Intervals talk = merged(comm[pid]);
    RankTime r{pid, name, length(busy), length(talk), length(combine(talk, busy, /*intersect=*/true)), 0};
    if (window.count(pid) != 0) r.window_s = window[pid].second - window[pid].first;
    out.push_back(r);
  }
  return out;
}

std::optional<parallel::pipeline::Timeline> pipeline_timeline(const json& trace) {
  namespace pl = parallel::pipeline;
  // The pipeline ranks of replica 0, one a stage: names "(dp 0, pp j, ...)" with every other
  // coordinate 0 (train::rank_name's), in pp order.
  std::map<int, int> stage_of_pid;
  const std::map<int, std::string> names = process_names(trace);
  for (const auto& [pid, name] : names) {
    const size_t at = name.find("(dp 0, pp ");
    if (at != std::string::npos && first_of_its_stage(name, at + 10))
      stage_of_pid[pid] = pp_stage(name, at + 10, names.size());
  }
  const std::vector<ParsedSpan> all = spans(trace);
  std::map<int, std::pair<double, double>> last_step;  // per pid
  for (const ParsedSpan& s : all)
    if (s.tid == 0 && s.cat == "step" && (last_step.count(s.pid) == 0 || s.start > last_step[s.pid].first))
      last_step[s.pid] = {s.start, s.end};
  pl::Timeline t;
  for (const auto& [pid, stage] : stage_of_pid) t.pp = std::max(t.pp, stage + 1);
  t.ranks.resize(static_cast<size_t>(t.pp));
  t.peak_activations.assign(static_cast<size_t>(t.pp), 0);
  double origin = 1e300;
  bool any = false;
  for (const ParsedSpan& s : all) {
    if (s.tid != 0 || s.cat != "pipeline" || stage_of_pid.count(s.pid) == 0 || last_step.count(s.pid) == 0) continue;
    if (s.start < last_step[s.pid].first || s.end > last_step[s.pid].second) continue;
    pl::TimedAction a;
    a.action.kind = s.name == "F" ? pl::ActionKind::Forward : pl::ActionKind::Backward;
    a.action.micro_batch = event_int(s.event->at("args").at("mb"), s.index, "args.mb");
    a.action.chunk = event_int(s.event->at("args").at("chunk"), s.index, "args.chunk");
    a.start = s.start * 1e3;
    a.end = s.end * 1e3;
    origin = std::min(origin, a.start);
    t.micro_batches = std::max(t.micro_batches, a.action.micro_batch + 1);
    t.chunks = std::max(t.chunks, a.action.chunk + 1);
    t.ranks[static_cast<size_t>(stage_of_pid[s.pid])].push_back(a);
    any = true;
  }
  if (!any) return std::nullopt;
  for (auto& rank : t.ranks) {
    std::sort(rank.begin(), rank.end(), [](const pl::TimedAction& a, const pl::TimedAction& b) { return a.start < b.start; });
    for (pl::TimedAction& a : rank) a.start -= origin, a.end -= origin;
  }
  return t;
}

}  // namespace loom::report
