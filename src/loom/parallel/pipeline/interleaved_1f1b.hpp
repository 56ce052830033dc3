// Interleaved 1F1B (Narayanan et al. 2021, Megatron-LM's virtual pipeline): each rank holds v
// model chunks, chunk c of rank r being virtual stage c*p + r, so a micro-batch passes every
// rank v times. Micro-batches go through in groups of p: a rank runs chunk 0's forwards of a
// group, then chunk 1's, ...; backwards visit the chunks in reverse. Warm-up is
// 2(p - r - 1) + (v - 1)p forwards, then one forward / one backward, then cool-down.
// Bubble: (p - 1)/(m v), paid for with v times more transfers. Needs m divisible by p.
#pragma once

#include "loom/parallel/pipeline/schedule.hpp"

namespace loom::parallel::pipeline {

// With chunks == 1 this is one_f_one_b (as in Megatron); otherwise throws loom::Error unless
// micro_batches is a multiple of pp.
Schedule interleaved_1f1b(int pp, int micro_batches, int chunks);

}  // namespace loom::parallel::pipeline
