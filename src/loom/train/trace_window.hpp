// `loom train --trace`: the steps traced (trace_steps "5:8"; by default 2:4, after the first
// step's warm-up) and, when that window closes, every rank's events merged onto rank 0 into
// <out_dir>/trace.json, a Chrome trace-event file (Perfetto, chrome://tracing): one process
// per rank named with its mesh coordinates, one row per compute or communication thread.
// Times share one origin: every rank starts its clock as it leaves a barrier.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/comm/process_group.hpp"
#include "loom/trace/recorder.hpp"
#include "loom/train/config.hpp"
#include "loom/train/trace_steps.hpp"

namespace loom::train {

// "rank 5 (dp 1, pp 0, tp 1)": a rank and its coordinates in the layout's device mesh.
std::string rank_name(const TrainConfig& config, int rank);

// Chrome trace events of one rank (pid = rank), comma-separated, one per line: process and
// thread names first, then the recorded spans, counters and asynchronous spans.
std::string chrome_events(const std::vector<trace::Event>& events, const std::vector<std::string>& rows, int rank,
                          const std::string& process_name);

class TraceWindow {
 public:
  // Inactive unless config.trace. world: the job's processes.
  TraceWindow(const TrainConfig& config, comm::ProcessGroup& world);
  // Collective while tracing is on: around each step (1-based number).
  void before_step(int64_t step);
  void after_step(int64_t step);
  // Closes a window the run ended inside (collective).
  void finish();
  bool active() const { return on_; }

 private:
  void write();

  bool on_ = false, recording_ = false, written_ = false;
  TraceSteps steps_;
  std::string path_, process_name_, layout_;
  comm::ProcessGroup& world_;
};

}  // namespace loom::train
