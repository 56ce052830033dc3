// The cost of context parallelism's K/V ring (parallel/context_parallel/ring_attention.hpp)
// for the planner: the bytes one cp rank sends per step, as the ring's own counter
// (RingStats::bytes_sent) counts them, and how much of the ring's time on the link the block
// attention compute hides. Pure arithmetic: `loom plan` and the accounting test use it alike.
#pragma once

#include <cstdint>

namespace loom::plan {

struct RingShape {
  int64_t B = 1, T = 1;  // a micro-batch: B sequences of T tokens (the whole sequence, all cp ranks)
  int64_t C = 1, L = 1;  // width, transformer blocks (on this rank's pipeline stage)
  int64_t M = 1;         // micro-batches per step
  int64_t tp = 1;        // tensor-parallel degree: a rank holds C / tp of K and V
  bool recompute = false;  // full recompute runs each layer's forward (and its ring) again
  int64_t value_bytes = 4;
};

// One hop: this rank's K and V, B x T/cp rows of 2C/tp values.
int64_t ring_hop_bytes(const RingShape& s, int64_t cp);

// Hops one rank sends per layer and micro-batch: cp - 1 in forward (K/V), 2 cp - 1 in
// backward (K/V cp - 1 times, the partial dK/dV after each of the cp steps, the last one
// back to its owner), and cp - 1 more for a recomputed forward.
int64_t ring_hops_per_layer(int64_t cp, bool recompute);

// Bytes one rank sends around the ring in a training step (0 without context parallelism).
int64_t ring_bytes_per_step(const RingShape& s, int64_t cp);

// One layer's ring for one micro-batch, seconds: on the link (every hop, alpha + bytes x
// beta), and exposed (the part the block compute does not hide). Forward posts step s + 1's
// K/V before computing step s's blocks (1/cp of the rank's attention), so each of the cp - 1
// hops hides under one step. Backward: step 0 hides the first K/V hop; steps 1..cp-2 carry a
// K/V hop and the previous step's dK/dV on the same link; the last step the previous dK/dV;
// the final dK/dV hop to its owner has nothing left to hide under.
struct RingTime {
  double forward_link_s = 0, forward_exposed_s = 0;
  double backward_link_s = 0, backward_exposed_s = 0;
};
RingTime ring_layer_time(int64_t cp, double hop_s, double attention_forward_s, double attention_backward_s);

}  // namespace loom::plan
