#include "loom/plan/context_parallel_cost.hpp"

#include <algorithm>

namespace loom::plan {

int64_t ring_hop_bytes(const RingShape& s, int64_t cp) { return s.B * (s.T / cp) * 2 * (s.C / s.tp) * s.value_bytes; }

int64_t ring_hops_per_layer(int64_t cp, bool recompute) {
  if (cp <= 1) return 0;
  return (recompute ? 2 : 1) * (cp - 1) + (2 * cp - 1);
}

int64_t ring_bytes_per_step(const RingShape& s, int64_t cp) {
  return s.M * s.L * ring_hops_per_layer(cp, s.recompute) * ring_hop_bytes(s, cp);
}

RingTime ring_layer_time(int64_t cp, double hop_s, double attention_forward_s, double attention_backward_s) {
  RingTime t;
  if (cp <= 1) return t;
  const double steps = static_cast<double>(cp);
  const double forward_step = attention_forward_s / steps, backward_step = attention_backward_s / steps;
  t.forward_link_s = (steps - 1.0) * hop_s;
  t.forward_exposed_s = (steps - 1.0) * std::max(0.0, hop_s - forward_step);
  t.backward_link_s = (2.0 * steps - 1.0) * hop_s;
  // Per step, the hops in flight: 1 (step 0), 2 (steps 1..cp-2), 1 (step cp-1); then the last.
  for (int64_t s = 0; s < cp; ++s) {
    const double in_flight = (s == 0 || s == cp - 1) ? 1.0 : 2.0;
    t.backward_exposed_s += std::max(0.0, in_flight * hop_s - backward_step);
  }
  t.backward_exposed_s += hop_s;
  return t;
}

}  // namespace loom::plan
