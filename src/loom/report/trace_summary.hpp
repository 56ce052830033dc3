// What the run report reads from a trace.json (train/trace_window.hpp): per rank, the time
// spent computing, communicating, and the share of the communication that ran while the
// rank computed (overlapped); and the pipeline timeline of the last traced step.
// Compute is the compute thread's forward, backward, loss, optimizer and data spans minus
// the waits inside them; communication is every communication thread's spans plus the
// pipeline's receives. A process or thread id, micro-batch or chunk that is no index (1e300,
// -1, 3.5, "NaN"), or a pp stage past the trace's processes, is a FieldError naming the event.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/parallel/pipeline/timeline.hpp"

namespace loom::report {

struct RankTime {
  int rank = 0;
  std::string name;  // "rank 1 (dp 0, pp 1, tp 0)"
  double compute_s = 0, comm_s = 0, overlapped_s = 0, window_s = 0;
};

std::vector<RankTime> rank_times(const nlohmann::json& trace);

// The pipeline of data-parallel replica 0 (tp rank 0) in its last traced step, times in
// milliseconds from its first compute; nullopt when the trace has no pipeline spans.
std::optional<parallel::pipeline::Timeline> pipeline_timeline(const nlohmann::json& trace);

}  // namespace loom::report
