// Stopping a run cleanly. SIGINT (Ctrl-C), SIGTERM (what a scheduler sends before it kills a
// job at its time limit or on preemption: SLURM's scancel and time limit, Kubernetes) and
// SIGUSR1 (`sbatch --signal=USR1@300` sends it to every task ahead of the limit; mpirun
// forwards it to every rank) ask the run to stop after its current step. The ranks agree
// after each step, so every rank stops after the same one whichever rank the signal reached;
// the trainer then saves a checkpoint and the command exits with 128 + the signal's number
// (the run did not finish; `--resume latest` continues it). A second signal ends the process
// at once, as it would have without Loom: checkpoints are written atomically, so the last
// saved one is kept.
#pragma once

#include <memory>
#include <string>

#include "loom/comm/process_group.hpp"

namespace loom::train {

class StopRequest {
 public:
  // Collective over world: installs the handlers and makes the group the ranks agree on
  // (its own, so the agreement is counted in no layout group's traffic).
  explicit StopRequest(comm::ProcessGroup& world);
  ~StopRequest();  // the handlers that were there before
  StopRequest(const StopRequest&) = delete;
  StopRequest& operator=(const StopRequest&) = delete;

  // Collective over world's ranks, after each step: the signal a rank received (the highest
  // number when several did), or 0 when none did.
  int agreed_signal();
  // The same agreement carrying one more fact each rank states (`here`): everywhere is set to
  // whether every rank stated it (a checkpoint written behind training has ended on every
  // rank), in the same all-reduce.
  int agreed_signal(bool here, bool& everywhere);

 private:
  std::unique_ptr<comm::ProcessGroup> group_;
};

// "SIGTERM", "SIGINT", "SIGUSR1", or "signal N".
std::string signal_name(int signal);

}  // namespace loom::train
