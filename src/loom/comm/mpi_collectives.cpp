#include "loom/comm/mpi_collectives.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "loom/comm/mpi_util.hpp"
#include "loom/error.hpp"

namespace loom::comm {

CommWait comm_wait_from_environment() {
  const char* e = std::getenv("LOOM_COMM_WAIT");
  if (e == nullptr || std::string(e) == "sleep") return CommWait::Sleep;
  check(std::string(e) == "spin", "LOOM_COMM_WAIT must be 'sleep' or 'spin', got '", e, "'");
  return CommWait::Spin;
}

CommWait comm_wait() {
  static const CommWait wait = comm_wait_from_environment();
  return wait;
}

void PollBackoff::pause() {
  constexpr int kBusyPolls = 64;
  constexpr int64_t kLongestSleepUs = 200;
  if (comm_wait() == CommWait::Spin || ++polls_ <= kBusyPolls) return;
  std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
  sleep_us_ = std::min(2 * sleep_us_, kLongestSleepUs);
}

void wait_without_spinning(MPI_Request& request, const char* what) {
  PollBackoff backoff;
  for (;;) {
    int done = 0;
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
    if (done != 0) return;
    backoff.pause();
  }
}

namespace {

// Runs a blocking call, or starts its non-blocking twin and waits without spinning.
template <typename Blocking, typename Start>
void run(const char* blocking_name, Blocking blocking, const char* start_name, Start start) {
  if (comm_wait() == CommWait::Spin) {
    check_mpi(blocking(), blocking_name);
    return;
  }
  MPI_Request request;
  check_mpi(start(&request), start_name);
  wait_without_spinning(request, start_name);
}

}  // namespace

void all_reduce_in_place(void* data, int64_t n, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  const int count = mpi_count(n);
  run("MPI_Allreduce", [&] { return MPI_Allreduce(MPI_IN_PLACE, data, count, type, op, comm); },
      "MPI_Iallreduce", [&](MPI_Request* r) { return MPI_Iallreduce(MPI_IN_PLACE, data, count, type, op, comm, r); });
}

void reduce_scatter_block(const void* in, void* out, int64_t n, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  const int count = mpi_count(n);
  run("MPI_Reduce_scatter_block", [&] { return MPI_Reduce_scatter_block(in, out, count, type, op, comm); },
      "MPI_Ireduce_scatter_block",
      [&](MPI_Request* r) { return MPI_Ireduce_scatter_block(in, out, count, type, op, comm, r); });
}

void all_gather_block(const void* in, void* out, int64_t n, MPI_Datatype type, MPI_Comm comm) {
  const int count = mpi_count(n);
  run("MPI_Allgather", [&] { return MPI_Allgather(in, count, type, out, count, type, comm); },
      "MPI_Iallgather", [&](MPI_Request* r) { return MPI_Iallgather(in, count, type, out, count, type, comm, r); });
}

void barrier(MPI_Comm comm) {
  run("MPI_Barrier", [&] { return MPI_Barrier(comm); }, "MPI_Ibarrier",
      [&](MPI_Request* r) { return MPI_Ibarrier(comm, r); });
}

void broadcast(void* data, int64_t n, MPI_Datatype type, int root, MPI_Comm comm) {
  const int count = mpi_count(n);
  run("MPI_Bcast", [&] { return MPI_Bcast(data, count, type, root, comm); },
      "MPI_Ibcast", [&](MPI_Request* r) { return MPI_Ibcast(data, count, type, root, comm, r); });
}

void all_to_all_block(const void* in, void* out, int64_t n, MPI_Datatype type, MPI_Comm comm) {
  const int count = mpi_count(n);
  run("MPI_Alltoall", [&] { return MPI_Alltoall(in, count, type, out, count, type, comm); },
      "MPI_Ialltoall", [&](MPI_Request* r) { return MPI_Ialltoall(in, count, type, out, count, type, comm, r); });
}

void all_to_all_v(const void* in, const int* send_counts, const int* send_offsets, void* out, const int* recv_counts,
                  const int* recv_offsets, MPI_Datatype type, MPI_Comm comm) {
  run("MPI_Alltoallv",
      [&] { return MPI_Alltoallv(in, send_counts, send_offsets, type, out, recv_counts, recv_offsets, type, comm); },
      "MPI_Ialltoallv", [&](MPI_Request* r) {
        return MPI_Ialltoallv(in, send_counts, send_offsets, type, out, recv_counts, recv_offsets, type, comm, r);
      });
}

void exchange(const float* send, int send_n, int dst, float* recv, int recv_n, int src, int tag, MPI_Comm comm) {
  if (comm_wait() == CommWait::Spin) {
    check_mpi(MPI_Sendrecv(send, send_n, MPI_FLOAT, dst, tag, recv, recv_n, MPI_FLOAT, src, tag, comm, MPI_STATUS_IGNORE),
              "MPI_Sendrecv");
    return;
  }
  MPI_Request requests[2];
  check_mpi(MPI_Irecv(recv, recv_n, MPI_FLOAT, src, tag, comm, &requests[0]), "MPI_Irecv");
  check_mpi(MPI_Isend(send, send_n, MPI_FLOAT, dst, tag, comm, &requests[1]), "MPI_Isend");
  wait_without_spinning(requests[0], "MPI_Irecv");
  wait_without_spinning(requests[1], "MPI_Isend");
}

}  // namespace loom::comm
