#include "loom/comm/mpi_runtime.hpp"

#include <cstdlib>

#include "loom/error.hpp"

namespace loom::comm {

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    MPI_Finalize();
    fail("the MPI library provides thread level ", provided, ", Loom needs MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE,
         ")");
  }
  watchdog_ = std::make_unique<Watchdog>(MPI_COMM_WORLD);
  world_ = std::make_unique<ProcessGroup>(MPI_COMM_WORLD, "world");
}

MpiRuntime::~MpiRuntime() {
  world_.reset();
  watchdog_.reset();
  MPI_Finalize();
}

void MpiRuntime::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

}  // namespace loom::comm
