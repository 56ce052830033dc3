// The alpha-beta cost model of collectives (Hockney; Thakur, Rabenseifner & Gropp 2005):
// sending m bytes costs alpha + m * beta. Pure functions, used by `loom bench comm` to put
// a prediction next to each measurement and by the planner to price a layout.
#pragma once

#include <cstdint>
#include <string>

namespace loom::plan {

struct LinkCost {
  double alpha_s = 0.0;        // latency per message, seconds
  double beta_s_per_byte = 0;  // inverse bandwidth, seconds per byte
};

// Predicted seconds of an all-reduce of `bytes` on p ranks with the named algorithm
// ("ring", "tree", "rhd", "param-server"; servers for the latter). Returns a negative value
// for algorithms without a model ("mpi": the library chooses its own).
double all_reduce_seconds(const std::string& algorithm, int64_t bytes, int p, const LinkCost& link, int servers = 1);

// Bus bandwidth as nccl-tests defines it for all-reduce: algorithm bandwidth * 2 (p-1) / p,
// comparable across rank counts (the link speed a ring would need).
double all_reduce_bus_bandwidth(int64_t bytes, double seconds, int p);

}  // namespace loom::plan
