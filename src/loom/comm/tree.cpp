// Binomial-tree all-reduce: reduce to rank 0 in ceil(log2 p) rounds (at round k, ranks with
// bit k set send everything to the rank 2^k below and drop out), then broadcast back down
// the same tree. 2 log2(p) messages of the full size: few, so it wins for small messages.
#include <vector>

#include "loom/comm/algorithms.hpp"
#include "loom/comm/mpi_util.hpp"

namespace loom::comm {

namespace {
constexpr int kTreeTag = 201;
}

void tree_all_reduce(MPI_Comm comm, float* data, int64_t n, ReduceOp op) {
  const int p = comm_size(comm), r = comm_rank(comm);
  if (p == 1) return;
  std::vector<float> incoming(static_cast<size_t>(n));
  int mask = 1;
  for (; mask < p; mask <<= 1) {
    if (r & mask) {
      check_mpi(MPI_Send(data, mpi_count(n), MPI_FLOAT, r - mask, kTreeTag, comm), "MPI_Send");
      break;
    }
    if (r + mask < p) {
      check_mpi(MPI_Recv(incoming.data(), mpi_count(n), MPI_FLOAT, r + mask, kTreeTag, comm, MPI_STATUS_IGNORE),
                "MPI_Recv");
      reduce_into(data, incoming.data(), n, op);
    }
  }
  // Broadcast down: a rank that sent at round k receives there, then serves rounds below k.
  if (r != 0) check_mpi(MPI_Recv(data, mpi_count(n), MPI_FLOAT, r - mask, kTreeTag + 1, comm, MPI_STATUS_IGNORE), "MPI_Recv");
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (r + mask < p) check_mpi(MPI_Send(data, mpi_count(n), MPI_FLOAT, r + mask, kTreeTag + 1, comm), "MPI_Send");
}

}  // namespace loom::comm
