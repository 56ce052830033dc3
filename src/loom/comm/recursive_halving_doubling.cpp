// Recursive halving-doubling all-reduce (Rabenseifner 2004; Thakur, Rabenseifner & Gropp
// 2005): a reduce-scatter by recursive halving (log2 p exchanges of half, a quarter, ... of
// the vector with the partner at distance p/2, p/4, ...) and an all-gather by recursive
// doubling in reverse. For p not a power of two, the standard fix-up folds the first 2*rem
// ranks pairwise onto rem ranks before and unfolds after (rem = p - largest power of two).
#include <vector>

#include "loom/comm/algorithms.hpp"
#include "loom/comm/mpi_util.hpp"

namespace loom::comm {

namespace {

constexpr int kRhdTag = 301;

struct Exchange {
  int partner;
  int64_t keep_lo, keep_hi, give_lo, give_hi;  // element ranges of the vector
};

}  // namespace

void rhd_all_reduce(MPI_Comm comm, float* data, int64_t n, ReduceOp op) {
  const int p = comm_size(comm), r = comm_rank(comm);
  if (p == 1) return;
  int pof2 = 1;
  while (pof2 * 2 <= p) pof2 *= 2;
  const int rem = p - pof2;
  std::vector<float> incoming(static_cast<size_t>(n));

  // Fold: among the first 2*rem ranks, each even rank hands its vector to the odd one above.
  int newrank = r >= 2 * rem ? r - rem : (r % 2 == 1 ? r / 2 : -1);
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      check_mpi(MPI_Send(data, mpi_count(n), MPI_FLOAT, r + 1, kRhdTag, comm), "MPI_Send");
    } else {
      check_mpi(MPI_Recv(incoming.data(), mpi_count(n), MPI_FLOAT, r - 1, kRhdTag, comm, MPI_STATUS_IGNORE), "MPI_Recv");
      reduce_into(data, incoming.data(), n, op);
    }
  }

  if (newrank >= 0) {
    auto real_rank = [&](int nr) { return nr < rem ? 2 * nr + 1 : nr + rem; };
    std::vector<Exchange> steps;
    int64_t lo = 0, hi = n;
    for (int mask = pof2 / 2; mask > 0; mask /= 2) {
      const int64_t mid = lo + (hi - lo) / 2;
      const bool lower = (newrank & mask) == 0;  // the lower partner keeps the lower half
      Exchange e{real_rank(newrank ^ mask), lower ? lo : mid, lower ? mid : hi, lower ? mid : lo, lower ? hi : mid};
      sendrecv(comm, data + e.give_lo, e.give_hi - e.give_lo, e.partner, incoming.data(), e.keep_hi - e.keep_lo,
               e.partner, kRhdTag + 1);
      reduce_into(data + e.keep_lo, incoming.data(), e.keep_hi - e.keep_lo, op);
      steps.push_back(e);
      lo = e.keep_lo;
      hi = e.keep_hi;
    }
    // All-gather: undo the halvings, each time swapping what we kept for what we gave.
    for (auto it = steps.rbegin(); it != steps.rend(); ++it)
      sendrecv(comm, data + it->keep_lo, it->keep_hi - it->keep_lo, it->partner, data + it->give_lo,
               it->give_hi - it->give_lo, it->partner, kRhdTag + 2);
  }

  // Unfold: the odd rank of each folded pair returns the result to its even partner.
  if (r < 2 * rem) {
    if (r % 2 == 1) check_mpi(MPI_Send(data, mpi_count(n), MPI_FLOAT, r - 1, kRhdTag + 3, comm), "MPI_Send");
    else check_mpi(MPI_Recv(data, mpi_count(n), MPI_FLOAT, r + 1, kRhdTag + 3, comm, MPI_STATUS_IGNORE), "MPI_Recv");
  }
}

}  // namespace loom::comm
