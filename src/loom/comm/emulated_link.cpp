#include "loom/comm/emulated_link.hpp"

#include <algorithm>

namespace loom::comm {

namespace {

// The largest of the chunks of n elements over `parts`, as chunk_begin splits them.
int64_t largest_chunk(int64_t n, int parts) {
  int64_t largest = 0;
  for (int c = 0; c < parts; ++c) largest = std::max(largest, chunk_begin(n, parts, c + 1) - chunk_begin(n, parts, c));
  return largest;
}

// One message of `elements` elements of element_bytes each.
double message_seconds(const EmulatedLink& link, int64_t elements, int element_bytes) {
  return link.alpha_s + static_cast<double>(elements) * element_bytes * link.beta_s_per_byte;
}

}  // namespace

EmulatedLink emulated_link(double gbps, double latency_us) {
  if (gbps <= 0) return {};
  return {latency_us * 1e-6, 8.0 / (gbps * 1e9)};
}

double emulated_message_seconds(const EmulatedLink& link, int64_t bytes) {
  if (!link.on()) return 0.0;
  return link.alpha_s + static_cast<double>(bytes) * link.beta_s_per_byte;
}

double emulated_ring_half_seconds(const EmulatedLink& link, int64_t n, int p, int element_bytes) {
  if (!link.on() || p <= 1) return 0.0;
  return (p - 1) * message_seconds(link, largest_chunk(n, p), element_bytes);  // p - 1 steps in lockstep
}

double emulated_all_reduce_seconds(const EmulatedLink& link, AllReduceAlgorithm algorithm, int64_t n, int p,
                                   int servers, int element_bytes) {
  if (!link.on() || p <= 1) return 0.0;
  switch (algorithm) {
    case AllReduceAlgorithm::Mpi:
    case AllReduceAlgorithm::Ring: return 2.0 * emulated_ring_half_seconds(link, n, p, element_bytes);
    case AllReduceAlgorithm::Tree: {
      int rounds = 0;  // rank 0 receives in every round up, then sends in every round down
      while ((1 << rounds) < p) ++rounds;
      return 2.0 * rounds * message_seconds(link, n, element_bytes);
    }
    case AllReduceAlgorithm::Rhd: {
      int pof2 = 1;
      while (pof2 * 2 <= p) pof2 *= 2;
      double halving = 0.0;  // each exchange waits for the larger half of what is left
      for (int64_t left = n, mask = pof2 / 2; mask > 0; mask /= 2) {
        left -= left / 2;
        halving += message_seconds(link, left, element_bytes);
      }
      const double fold = pof2 == p ? 0.0 : 2.0 * message_seconds(link, n, element_bytes);  // and unfold
      return 2.0 * halving + fold;  // the all-gather retraces the halving
    }
    case AllReduceAlgorithm::ParamServer: {
      const int k = std::clamp(servers, 1, p);
      // The busiest server receives p - 1 pushes and sends p - 1 pulls of its shard.
      return 2.0 * (p - 1) * message_seconds(link, largest_chunk(n, k), element_bytes);
    }
  }
  return 0.0;
}

}  // namespace loom::comm
