// The gradient-aggregation algorithms the seeds compare, written on MPI point-to-point
// messages over one communicator. Each is correct for any group size (1 and non-powers of
// two included) and any element count (0 included); results are left un-averaged (the
// caller applies finish_reduction). Cost in the alpha-beta model for n bytes on p ranks:
//   ring:   2(p-1) alpha + 2 (p-1)/p n beta        (bandwidth-optimal)
//   tree:   2 log2(p) (alpha + n beta)              (latency-optimal for small n)
//   rhd:    2 log2(p) alpha + 2 (p-1)/p n beta      (Rabenseifner; + 2 steps when p is not 2^k)
//   param-server with k shards: 2 (p-1)/k * ... on the busiest server (see parameter_server.cpp)
#pragma once

#include <cstdint>
#include <string>

#include <mpi.h>

#include "loom/comm/reduce_op.hpp"

namespace loom::comm {

enum class AllReduceAlgorithm { Mpi, Ring, Tree, Rhd, ParamServer };

std::string algorithm_name(AllReduceAlgorithm a);
// "mpi", "ring", "tree", "rhd", "param-server"; throws loom::Error naming the choices.
AllReduceAlgorithm parse_algorithm(const std::string& name);

// Chunk c of n elements split over p parts: [chunk_begin(c), chunk_begin(c + 1)).
inline int64_t chunk_begin(int64_t n, int p, int c) { return n * c / p; }

void ring_all_reduce(MPI_Comm comm, float* data, int64_t n, ReduceOp op);
// data (n) in; on return chunk `rank` of data holds the reduction of everyone's chunk `rank`.
void ring_reduce_scatter(MPI_Comm comm, float* data, int64_t n, ReduceOp op);
// data (n): chunk `rank` in; on return every chunk holds its owner's values.
void ring_all_gather(MPI_Comm comm, float* data, int64_t n);

void tree_all_reduce(MPI_Comm comm, float* data, int64_t n, ReduceOp op);
void rhd_all_reduce(MPI_Comm comm, float* data, int64_t n, ReduceOp op);
// servers: how many ranks (0..servers-1) each own a shard of the vector.
void param_server_all_reduce(MPI_Comm comm, float* data, int64_t n, ReduceOp op, int servers);

}  // namespace loom::comm
