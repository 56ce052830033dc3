// Small wrappers that turn MPI return codes into loom::Error and 64-bit counts into MPI's int.
#pragma once

#include <cstdint>

#include <mpi.h>

namespace loom::comm {

// Throws loom::Error with MPI's own description of the code.
void check_mpi(int code, const char* what);
int mpi_count(int64_t n);  // throws when n does not fit an MPI count

// Blocking exchange of float buffers with two neighbours (either count may be 0).
void sendrecv(MPI_Comm comm, const float* send, int64_t send_n, int dst, float* recv, int64_t recv_n, int src,
              int tag);

int comm_rank(MPI_Comm comm);
int comm_size(MPI_Comm comm);

}  // namespace loom::comm
