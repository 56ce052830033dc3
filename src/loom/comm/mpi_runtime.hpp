// MpiRuntime: MPI's lifetime in one object, owned by main (the only place the world
// exists). Initialises MPI with MPI_THREAD_MULTIPLE, because each process group's
// communication thread calls MPI while the compute thread posts point-to-point transfers.
#pragma once

#include <memory>

#include "loom/comm/process_group.hpp"
#include "loom/comm/watchdog.hpp"

namespace loom::comm {

class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();  // frees the world group, then finalizes MPI
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  ProcessGroup& world() { return *world_; }
  // Ends every rank of the job with this exit code (after a fatal error on one rank).
  [[noreturn]] static void abort(int code);

 private:
  std::unique_ptr<Watchdog> watchdog_;  // before any group, so every group is watched
  std::unique_ptr<ProcessGroup> world_;
};

}  // namespace loom::comm
