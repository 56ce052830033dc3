#include "loom/comm/mpi_util.hpp"

#include <climits>

#include "loom/comm/mpi_collectives.hpp"
#include "loom/error.hpp"

namespace loom::comm {

void check_mpi(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  fail(what, " failed: ", std::string(text, static_cast<size_t>(len)));
}

int mpi_count(int64_t n) {
  check(n >= 0 && n <= INT_MAX, "message of ", n, " elements exceeds MPI's count limit");
  return static_cast<int>(n);
}

void sendrecv(MPI_Comm comm, const float* send, int64_t send_n, int dst, float* recv, int64_t recv_n, int src,
              int tag) {
  exchange(send, mpi_count(send_n), dst, recv, mpi_count(recv_n), src, tag, comm);
}

int comm_rank(MPI_Comm comm) {
  int r = 0;
  MPI_Comm_rank(comm, &r);
  return r;
}

int comm_size(MPI_Comm comm) {
  int s = 0;
  MPI_Comm_size(comm, &s);
  return s;
}

}  // namespace loom::comm
