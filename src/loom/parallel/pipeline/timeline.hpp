// A pipeline schedule played out in time: each rank runs its actions in order, as soon as it
// can. Sends are buffered and take no time; a receive blocks until its matching send has been
// posted, so a forward of virtual stage k starts no earlier than stage k - 1's forward of the
// same micro-batch ended (a backward: stage k + 1's backward). With unit costs this is the
// picture the papers draw; fed with measured durations it is the executor's trace.
#pragma once

#include <vector>

#include "loom/parallel/pipeline/schedule.hpp"

namespace loom::parallel::pipeline {

struct StepCosts {
  double forward = 1.0;   // one forward of one micro-batch through one chunk
  double backward = 2.0;  // its backward: about twice the forward's FLOPs
};

struct TimedAction {
  Action action;
  double start = 0.0, end = 0.0;  // a receive: from reaching it to its data being there
};

struct Timeline {
  int pp = 1, micro_batches = 1, chunks = 1;
  std::vector<std::vector<TimedAction>> ranks;  // (pp) every action of the schedule, in order
  // Per rank: the most (micro-batch, chunk) activations held at once (a forward adds one, its
  // backward frees it). For one chunk per rank, micro-batches in flight.
  std::vector<int> peak_activations;

  double makespan() const;
  double busy(int rank) const;  // time spent in forwards and backwards
  // Idle share of the whole picture: idle / (pp * makespan).
  double bubble_fraction() const;
  // Idle time over compute time, the papers' measure: idle / sum of busy; (p - 1)/(m v) in theory.
  double bubble_over_compute() const;
};

// Throws loom::Error when the ranks deadlock, naming the cycle of waits ("rank 0: B0 waits for
// the gradient of micro-batch 0 from rank 1, and rank 1: F1 waits for ...") or the receive
// whose send never comes ("rank 2: B3 waits for the gradient of micro-batch 3 that rank 3
// never sends").
Timeline simulate(const Schedule& s, StepCosts costs = {});

}  // namespace loom::parallel::pipeline
