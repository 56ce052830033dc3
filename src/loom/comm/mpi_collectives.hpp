// MPI's collectives and exchanges as Loom's communication threads run them. Open MPI's blocking
// calls poll until every peer has arrived (mpi_yield_when_idle only yields between polls), so a
// communication thread waiting for a peer that is still computing takes CPU time from compute:
// from its own rank's main thread, whose core it shares once overlap keeps a collective in
// flight during a GEMM, and from other ranks when ranks outnumber cores (they are then pinned
// a core per group of ranks, threads included). So by default a collective is started
// non-blocking and completed by polling that backs off into short sleeps. LOOM_COMM_WAIT=spin
// keeps MPI's blocking calls (and their algorithms) for nodes where every thread has a core.
#pragma once

#include <cstdint>

#include <mpi.h>

namespace loom::comm {

enum class CommWait { Sleep, Spin };
// LOOM_COMM_WAIT: "sleep" (the default) or "spin"; anything else is an error naming the choices.
CommWait comm_wait_from_environment();
CommWait comm_wait();  // read once per process

// The pause between two polls of a request: none for the first polls (a transfer whose peer
// is there completes at once), then sleeps doubling from 10 us to 200 us; under
// LOOM_COMM_WAIT=spin never. Each poll also progresses a non-blocking collective's next round.
class PollBackoff {
 public:
  void pause();

 private:
  int polls_ = 0;
  int64_t sleep_us_ = 10;
};

// Completes a started request, polling with a PollBackoff between polls.
void wait_without_spinning(MPI_Request& request, const char* what);

// The collectives, blocking or started and waited for as comm_wait() says. Counts are elements
// of `type`; in is MPI_IN_PLACE where MPI allows it.
void all_reduce_in_place(void* data, int64_t n, MPI_Datatype type, MPI_Op op, MPI_Comm comm);
void reduce_scatter_block(const void* in, void* out, int64_t n, MPI_Datatype type, MPI_Op op, MPI_Comm comm);
void all_gather_block(const void* in, void* out, int64_t n, MPI_Datatype type, MPI_Comm comm);
void barrier(MPI_Comm comm);
void broadcast(void* data, int64_t n, MPI_Datatype type, int root, MPI_Comm comm);
void all_to_all_block(const void* in, void* out, int64_t n, MPI_Datatype type, MPI_Comm comm);
void all_to_all_v(const void* in, const int* send_counts, const int* send_offsets, void* out, const int* recv_counts,
                  const int* recv_offsets, MPI_Datatype type, MPI_Comm comm);
// A send to dst and a receive from src at once (MPI_Sendrecv), floats.
void exchange(const float* send, int send_n, int dst, float* recv, int recv_n, int src, int tag, MPI_Comm comm);

}  // namespace loom::comm
