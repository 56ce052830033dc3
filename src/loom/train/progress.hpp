// What a run tells its user while it trains: the progress line of each step (loss, lr,
// norm, tokens/s, MFU against the measured matmul peak, memory, communication hidden by
// overlap, pipeline bubble, tp traffic, ETA) and its metrics.jsonl record, the validation
// lines, the closing memory report and memory.json. Rank 0 speaks for the job.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "loom/comm/process_group.hpp"
#include "loom/parallel/gradient_sync.hpp"
#include "loom/parallel/zero.hpp"
#include "loom/plan/memory_model.hpp"
#include "loom/train/config.hpp"
#include "loom/train/metrics_log.hpp"
#include "loom/train/model_spec.hpp"
#include "loom/train/moe_metrics.hpp"

namespace loom::train {

struct StepResult {
  int64_t step = 0;  // the step just completed (1-based count of optimizer steps)
  float loss = 0.0f;
  float lr = 0.0f;
  double grad_norm = 0.0;
  bool skipped = false;  // non-finite loss or gradient with on_nan = "skip"
  // Tensor parallel: this rank's collectives on its tp group (or 3D grid axes) in the step
  // (1D: all blocking, so not hidden behind compute) and the bytes of the tensors they reduced.
  double tp_comm_seconds = 0.0;
  int64_t tp_comm_bytes = 0;
  // How long compute waited for those collectives (the rest was hidden under compute by
  // tp_overlap or tp_3d_overlap); < 0 without tensor parallelism.
  double tp_comm_exposed_seconds = -1.0;
  // Context parallel: this rank's ring attention in the step: the block compute, the waits
  // for K/V or dK/dV hops that compute did not hide (exposed), and the bytes it sent.
  double cp_compute_seconds = 0.0;
  double cp_wait_seconds = 0.0;
  int64_t cp_bytes = 0;
  double cp_link_seconds = 0.0;  // the hops' time on an emulated link (0 without one)
  double cp_link_exposed_seconds = 0.0;  // the part of it the block compute did not hide
  // Pipeline: the measured idle time over compute time of the step, and the theory's (p-1)/(m v).
  double pipeline_bubble = -1.0;
  double pipeline_bubble_theory = -1.0;
  std::vector<Metric> metrics;  // the family's own numbers (a GCN's train accuracy)
  MoeStepStats moe;  // a mixture of experts' loads, drops and exchanges (present only with one)
};

class Progress {
 public:
  // quiet: no lines (the metrics still go to metrics.jsonl on rank 0). work: what a step
  // processes (tokens, edges) and its FLOPs, for the throughput and MFU.
  Progress(const TrainConfig& config, comm::ProcessGroup& world, bool quiet, StepWork work);

  // Rank 0 appends to out_dir/metrics.jsonl from here on (once the run directory is its own).
  void open_metrics();
  // metrics.jsonl's {"kind": "start", "step": step} as a run starts training: readers drop the
  // records of later steps logged before it (a killed attempt's, or a branch a resume left).
  void run_starts(int64_t step);
  // Collective: the matmul peak of one rank (its threads), measured by rank 0 alone (ranks
  // measuring side by side on shared cores would each see a fraction) and shared.
  void measure_peak();
  double peak_gflops() const { return peak_gflops_; }
  // keep: a logged step (a lasting line and a metrics record); otherwise only the live line.
  void step(const StepResult& r, double step_seconds, bool keep, const parallel::GradientSync& sync);
  // An evaluation's loss and the family's metrics; kind "val" (during and after training) or "test".
  void validation(int64_t step, float val_loss, const std::vector<Metric>& metrics = {}, const std::string& kind = "val");
  // The run's last line: the steps trained, their time and mean throughput, and the commands
  // that show and use the run directory ("done: 800 steps in 1m02s of training, 53000 tok/s on average; ...").
  // Nothing when no step ran.
  void finished(const std::string& family) const;
  void say(const std::string& line) const;
  bool quiet() const { return quiet_; }

 private:
  // The share of its threads' cores a rank gets: below 1 when the node's ranks x threads
  // exceed its cores.
  double core_share() const;

  const TrainConfig& config_;
  comm::ProcessGroup& world_;
  bool quiet_;
  StepWork work_;
  bool live_ = false;  // stdout is a terminal of a process started without MPI
  std::unique_ptr<MetricsLog> metrics_;
  double peak_gflops_ = 0.0;
  double elapsed_seconds_ = 0.0;
  int64_t steps_timed_ = 0;
};

// "memory on rank 0: params 3.2 MiB (formula 3.2 MiB) | ...": the tracker's current bytes of
// model state next to the ZeRO formula, and the peaks of the rest; under ZeRO-2/3 (gathered > 0,
// the count of plan/zero_gathered.hpp) the peak of its units held whole next to that count.
std::string memory_report(int rank, const plan::StateBytes& formula, int64_t gathered);

}  // namespace loom::train
