// Parameter-server all-reduce (Li et al. 2014; the seeds' "centralised" aggregation): the
// vector is split into k shards, shard s owned by server rank s. Every rank pushes shard s
// to server s, the server sums the p contributions in rank order (deterministic), and every
// rank pulls each reduced shard back. With k = 1 one server carries 2 (p-1) n bytes: the
// bottleneck the seeds point at; sharding over k servers divides it by k.
#include <algorithm>
#include <vector>

#include "loom/comm/algorithms.hpp"
#include "loom/comm/mpi_util.hpp"
#include "loom/error.hpp"

namespace loom::comm {

namespace {
constexpr int kPushTag = 401, kPullTag = 402;
}

void param_server_all_reduce(MPI_Comm comm, float* data, int64_t n, ReduceOp op, int servers) {
  const int p = comm_size(comm), r = comm_rank(comm);
  check(servers >= 1, "param-server needs at least 1 server, got ", servers);
  if (p == 1) return;
  const int k = std::min(servers, p);
  auto shard_lo = [&](int s) { return chunk_begin(n, k, s); };
  auto shard_n = [&](int s) { return chunk_begin(n, k, s + 1) - chunk_begin(n, k, s); };

  // Push: servers receive every rank's copy of their shard into row q of `rows`.
  std::vector<float> rows;  // (p, shard_n(r)) on a server
  std::vector<MPI_Request> reqs;
  if (r < k) {
    rows.resize(static_cast<size_t>(p * shard_n(r)));
    for (int q = 0; q < p; ++q) {
      if (q == r) continue;
      reqs.emplace_back();
      check_mpi(MPI_Irecv(rows.data() + q * shard_n(r), mpi_count(shard_n(r)), MPI_FLOAT, q, kPushTag, comm, &reqs.back()),
                "MPI_Irecv");
    }
  }
  for (int s = 0; s < k; ++s) {
    if (s == r) continue;
    reqs.emplace_back();
    check_mpi(MPI_Isend(data + shard_lo(s), mpi_count(shard_n(s)), MPI_FLOAT, s, kPushTag, comm, &reqs.back()),
              "MPI_Isend");
  }
  check_mpi(MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
  reqs.clear();

  if (r < k) {  // sum rows 0..p-1 in order into our shard
    float* mine = data + shard_lo(r);
    std::copy(mine, mine + shard_n(r), rows.begin() + r * shard_n(r));
    std::copy(rows.begin(), rows.begin() + shard_n(r), mine);
    for (int q = 1; q < p; ++q) reduce_into(mine, rows.data() + q * shard_n(r), shard_n(r), op);
    for (int q = 0; q < p; ++q) {
      if (q == r) continue;
      reqs.emplace_back();
      check_mpi(MPI_Isend(mine, mpi_count(shard_n(r)), MPI_FLOAT, q, kPullTag, comm, &reqs.back()), "MPI_Isend");
    }
  }
  // Pull every other server's reduced shard.
  for (int s = 0; s < k; ++s) {
    if (s == r) continue;
    reqs.emplace_back();
    check_mpi(MPI_Irecv(data + shard_lo(s), mpi_count(shard_n(s)), MPI_FLOAT, s, kPullTag, comm, &reqs.back()),
              "MPI_Irecv");
  }
  check_mpi(MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
}

}  // namespace loom::comm
