// Ring all-reduce (Patarasuk & Yuan; Baidu's "ring allreduce"): a reduce-scatter in p - 1
// steps, each rank passing one chunk to its right neighbour and adding the one from its
// left, then an all-gather in p - 1 steps. Each rank sends 2 (p-1)/p of the data in all,
// independent of p: bandwidth-optimal. Chunks are uneven when p does not divide n.
#include <vector>

#include "loom/comm/algorithms.hpp"
#include "loom/comm/mpi_util.hpp"

namespace loom::comm {

namespace {
constexpr int kRingTag = 101;
int mod(int a, int p) { return ((a % p) + p) % p; }
}  // namespace

void ring_reduce_scatter(MPI_Comm comm, float* data, int64_t n, ReduceOp op) {
  const int p = comm_size(comm), r = comm_rank(comm);
  if (p == 1) return;
  const int right = mod(r + 1, p), left = mod(r - 1, p);
  std::vector<float> incoming(static_cast<size_t>(n / p + 1));  // the largest chunk
  // Step s: send chunk r-s-1 (holding s+1 contributions), receive chunk r-s-2 and add ours,
  // so after p-1 steps chunk r has all p contributions.
  for (int s = 0; s < p - 1; ++s) {
    const int send_c = mod(r - s - 1, p), recv_c = mod(r - s - 2, p);
    const int64_t send_b = chunk_begin(n, p, send_c), send_n = chunk_begin(n, p, send_c + 1) - send_b;
    const int64_t recv_b = chunk_begin(n, p, recv_c), recv_n = chunk_begin(n, p, recv_c + 1) - recv_b;
    sendrecv(comm, data + send_b, send_n, right, incoming.data(), recv_n, left, kRingTag);
    reduce_into(data + recv_b, incoming.data(), recv_n, op);
  }
}

void ring_all_gather(MPI_Comm comm, float* data, int64_t n) {
  const int p = comm_size(comm), r = comm_rank(comm);
  if (p == 1) return;
  const int right = mod(r + 1, p), left = mod(r - 1, p);
  // Step s: pass on chunk r-s (ours at s = 0), receive chunk r-s-1 in place.
  for (int s = 0; s < p - 1; ++s) {
    const int send_c = mod(r - s, p), recv_c = mod(r - s - 1, p);
    const int64_t send_b = chunk_begin(n, p, send_c), recv_b = chunk_begin(n, p, recv_c);
    sendrecv(comm, data + send_b, chunk_begin(n, p, send_c + 1) - send_b, right, data + recv_b,
             chunk_begin(n, p, recv_c + 1) - recv_b, left, kRingTag + 1);
  }
}

void ring_all_reduce(MPI_Comm comm, float* data, int64_t n, ReduceOp op) {
  ring_reduce_scatter(comm, data, n, op);
  ring_all_gather(comm, data, n);
}

}  // namespace loom::comm
