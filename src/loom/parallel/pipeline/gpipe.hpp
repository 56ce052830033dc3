// GPipe (Huang et al. 2019): every rank runs the forwards of all m micro-batches, then all
// their backwards. The simplest pipeline schedule; its price is memory: each rank holds the
// activations of all m micro-batches at once. Bubble: (p - 1)/m of the compute time.
#pragma once

#include "loom/parallel/pipeline/schedule.hpp"

namespace loom::parallel::pipeline {

Schedule gpipe(int pp, int micro_batches);

}  // namespace loom::parallel::pipeline
