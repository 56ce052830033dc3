// Start-up is watched too. MPI_Init and communicator creation (MPI_Comm_dup, MPI_Comm_split)
// block until every rank arrives and cannot be polled like the watchdog's waits, so a rank
// that stopped, crashed or never started would hold the others there forever, unseen. A
// StartupWatch gives such a step a deadline: past it, this rank says which step it waits
// in and exits with status 1, and mpirun ends the job (the rank that never printed the line
// is the one holding it up).
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace loom::comm {

class StartupWatch {
 public:
  // timeout_s <= 0: off. step: what this rank is about to wait in, for the message.
  StartupWatch(double timeout_s, std::string step);
  ~StartupWatch();  // the step completed: disarms
  StartupWatch(const StartupWatch&) = delete;
  StartupWatch& operator=(const StartupWatch&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  bool finished_ = false;
  std::thread thread_;
};

// This process's rank as the launcher gave it (before MPI_Init: OMPI_COMM_WORLD_RANK,
// PMIX_RANK or PMI_RANK); -1 when not launched by one.
int launcher_rank();

// LOOM_TEST_STOP_AT=<step>:<rank>: that rank stops itself (SIGSTOP) before the step ("split":
// the mesh's first group; "cp-ring": a ring attention hop; "ep-all-to-all": the expert-parallel
// count exchange; "plane-experts-gather": a mixture of experts' outputs gathered over a 3D
// grid's plane; "moe-capacity-gather": a mixture of experts' capacity counts gathered over a
// sequence's chunks; "zero-gather": a ZeRO-3 unit's all-gather; "watchdog-table": in the middle
// of writing its own watchdog table, as a collective starts), as a rank stopped by a debugger or the OS would (mpi.*stopped_rank).
void stop_for_a_test(const std::string& step);

}  // namespace loom::comm
