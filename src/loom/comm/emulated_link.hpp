// The emulated network of ProcessGroup::set_emulated_link: the seconds a collective of
// Loom's own implementations takes on a link of latency alpha and inverse bandwidth beta,
// priced step by step as the algorithm sends (a synchronous step waits for its largest
// chunk; rhd's fold and unfold; the busiest parameter server). plan/comm_cost.hpp keeps its
// own closed forms on even chunks: plan/ knows nothing of the run time, and a step time
// measured under emulation is then checked against a second derivation, not against the
// very function that slowed it down.
#pragma once

#include <cstdint>

#include "loom/comm/algorithms.hpp"

namespace loom::comm {

struct EmulatedLink {
  double alpha_s = 0.0;          // latency per message, seconds
  double beta_s_per_byte = 0.0;  // inverse bandwidth; 0: no emulation
  bool on() const { return beta_s_per_byte > 0.0; }
};

// gbps <= 0: off.
EmulatedLink emulated_link(double gbps, double latency_us);

// An all-reduce of n elements on p ranks (servers: the parameter server's shards), each
// element_bytes on the wire (4: fp32, 2: bf16). MPI's own algorithm is priced as a ring, the
// bandwidth-optimal choice it makes for large messages.
double emulated_all_reduce_seconds(const EmulatedLink& link, AllReduceAlgorithm algorithm, int64_t n, int p,
                                   int servers = 1, int element_bytes = 4);
// One point-to-point message of `bytes` bytes: alpha + bytes x beta (0 when off).
double emulated_message_seconds(const EmulatedLink& link, int64_t bytes);
// A ring reduce-scatter or all-gather of a whole vector of n elements: half a ring all-reduce.
double emulated_ring_half_seconds(const EmulatedLink& link, int64_t n, int p, int element_bytes = 4);

}  // namespace loom::comm
