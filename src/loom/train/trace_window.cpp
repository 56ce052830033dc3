#include "loom/train/trace_window.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "loom/comm/byte_transport.hpp"
#include "loom/comm/mesh_layout.hpp"
#include "loom/error.hpp"
#include "loom/train/safetensors.hpp"

namespace loom::train {

std::string rank_name(const TrainConfig& config, int rank) {
  const std::vector<comm::MeshDim> dims = config.mesh_dims();
  const std::vector<int> at = config.mesh_layout().coordinates(rank);
  // Every axis in mesh_dims() order (dp, pp, cp, the grid's depth, row, col, tp), but cp where
  // the run splits no sequences and tp under a grid (whose own axes say where the rank is).
  std::string where;
  for (size_t i = 0; i < dims.size(); ++i) {
    if ((dims[i].name == "cp" && config.cp == 1) || (dims[i].name == "tp" && config.tp_3d_on())) continue;
    where += (where.empty() ? "" : ", ") + dims[i].name + " " + std::to_string(at[i]);
  }
  return "rank " + std::to_string(rank) + " (" + where + ")";
}

std::string chrome_events(const std::vector<trace::Event>& events, const std::vector<std::string>& rows, int rank,
                          const std::string& process_name) {
  using nlohmann::json;
  std::string out;
  auto add = [&](const json& e) {
    if (!out.empty()) out += ",\n";
    out += e.dump();
  };
  add({{"ph", "M"}, {"pid", rank}, {"tid", 0}, {"name", "process_name"}, {"args", {{"name", process_name}}}});
  add({{"ph", "M"}, {"pid", rank}, {"tid", 0}, {"name", "process_sort_index"}, {"args", {{"sort_index", rank}}}});
  // Named rows: compute, and the communication threads that recorded something (a job
  // creates groups, e.g. of one rank, that never communicate).
  std::vector<bool> used(rows.size(), false);
  used[0] = true;
  for (const trace::Event& e : events)
    if (e.row >= 0 && static_cast<size_t>(e.row) < rows.size()) used[static_cast<size_t>(e.row)] = true;
  for (size_t r = 0; r < rows.size(); ++r) {
    if (!used[r]) continue;
    add({{"ph", "M"}, {"pid", rank}, {"tid", r}, {"name", "thread_name"}, {"args", {{"name", rows[r]}}}});
    add({{"ph", "M"}, {"pid", rank}, {"tid", r}, {"name", "thread_sort_index"}, {"args", {{"sort_index", r}}}});
  }
  for (const trace::Event& e : events) {
    json j{{"ph", std::string(1, e.phase)}, {"pid", rank}, {"tid", e.row}, {"name", e.name},
           {"ts", static_cast<double>(e.ts_ns) / 1e3}};
    if (!e.category.empty()) j["cat"] = e.category;
    if (e.phase == 'X') j["dur"] = static_cast<double>(e.dur_ns) / 1e3;
    if (e.phase == 'b' || e.phase == 'e') {
      // Asynchronous ids are global in the file: the rank in the high bits.
      char id[32];
      std::snprintf(id, sizeof id, "0x%llx", static_cast<unsigned long long>((uint64_t(rank) << 40) | e.id));
      j["id"] = id;
    }
    if (!e.args.is_null()) j["args"] = e.args;
    add(j);
  }
  return out;
}

TraceWindow::TraceWindow(const TrainConfig& config, comm::ProcessGroup& world) : world_(world) {
  if (!config.trace) return;
  check(!config.out_dir.empty(), "trace needs an out_dir to write trace.json into");
  on_ = true;
  steps_ = parse_trace_steps(config.trace_steps, config.steps);
  path_ = (std::filesystem::path(config.out_dir) / "trace.json").string();
  process_name_ = rank_name(config, world_.rank());
  layout_ = "dp " + std::to_string(config.dp) + " x pp " + std::to_string(config.pp) + " x tp " + std::to_string(config.tp);
}

void TraceWindow::before_step(int64_t step) {
  if (!on_ || recording_ || written_ || step < steps_.first || step > steps_.last) return;
  world_.barrier();  // the common origin of every rank's clock
  trace::start();
  recording_ = true;
}

void TraceWindow::after_step(int64_t step) {
  if (recording_ && step >= steps_.last) write();
}

void TraceWindow::finish() {
  if (recording_) write();
}

void TraceWindow::write() {
  trace::stop();
  recording_ = false;
  written_ = true;
  const std::vector<trace::Event> events = trace::take_events();
  const std::string mine = chrome_events(events, trace::row_names(), world_.rank(), process_name_);
  const std::vector<std::string> all = comm::gather_bytes(world_, mine);
  if (world_.rank() != 0) return;
  std::ostringstream out;
  out << "{\"displayTimeUnit\": \"ms\",\n\"otherData\": {\"layout\": \"" << layout_ << "\", \"trace_steps\": \""
      << steps_.first << ":" << steps_.last << "\"},\n\"traceEvents\": [\n";
  for (size_t q = 0; q < all.size(); ++q) out << (q > 0 ? ",\n" : "") << all[q];
  out << "\n]}\n";
  write_file_atomically(path_, out.str());  // a kill leaves no cut trace that readers refuse
  std::printf("wrote %s (steps %lld-%lld, %zu ranks; open it in https://ui.perfetto.dev or chrome://tracing)\n",
              path_.c_str(), static_cast<long long>(steps_.first), static_cast<long long>(steps_.last), all.size());
}

}  // namespace loom::train
