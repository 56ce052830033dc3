// What a pipeline rank holds for backward as it runs its part of a schedule: each forward of a
// (micro-batch, chunk) keeps that chunk's activations until the backward of the same pair frees
// them. The memory check (train/memory_budget.hpp) and the planner (plan/layout_cost.cpp) price a
// rank's activations with it, over the very action list the executor runs.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/parallel/pipeline/schedule.hpp"

namespace loom::parallel::pipeline {

// The most bytes held at once over `actions` (one rank's list; transfers ignored), where one
// micro-batch keeps chunk_bytes[c] through this rank's chunk c.
int64_t peak_held_bytes(const std::vector<Action>& actions, const std::vector<int64_t>& chunk_bytes);

// One micro-batch through one of this rank's chunks.
struct ChunkRun {
  int64_t kept = 0;      // held from its forward to its backward
  int64_t forward = 0;   // the most held at once while its forward runs, kept and received bytes included
  int64_t backward = 0;  // the same while its backward runs
};

// When a send's receiver posts its receive, which its send (of a tensor too large to leave
// at once) waits for: as late as the sending rank can tell (the memory check: what rank r has
// received since tells it the receive was posted), or on time (before the compute after the
// send ends: what a pipeline in step mostly sees; the executor's earliest).
enum class Receivers { Late, OnTime };

// For each send in rank r's list of `s` (transfers included), the index of the compute action at
// whose end the executor has reaped it (it reaps finished sends after each action): the first
// after the send, or under Receivers::Late the first after the send that comes after its
// receiver posted the receive; the list's size when none does (reaped at the end of the step).
// Other actions: the list's size. Every rank's at once (the order of the whole schedule is worked
// out once: callers walking every rank take this), or rank r's.
std::vector<std::vector<size_t>> sends_reaped(const Schedule& s, Receivers receivers = Receivers::Late);
std::vector<size_t> sends_reaped(const Schedule& s, int r, Receivers receivers = Receivers::Late);

// The most bytes held at once over `actions` (one rank's list, transfers included) as the
// executor runs them: each action's own peak on top of what the other (micro-batch, chunk) pairs
// keep, and the tensors in transit of `transfer_bytes` each: a receive's buffer from its post to
// the action that takes it, an output from the action that computes it through the action at
// which its send is reaped (`reaped`, sends_reaped's answer for the list).
int64_t peak_running_bytes(const std::vector<Action>& actions, const std::vector<ChunkRun>& chunks,
                           int64_t transfer_bytes, const std::vector<size_t>& reaped);

}  // namespace loom::parallel::pipeline
