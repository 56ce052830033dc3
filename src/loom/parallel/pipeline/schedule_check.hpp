// Pre-flight check of a pipeline schedule (issue 6): because a schedule is data, the whole
// schedule of all ranks is verified before the first step, so a bad one (a custom file, a new
// builder) fails with its first conflict named instead of hanging the job or silently
// computing a wrong gradient. A schedule that passes is one the executor can run.
#pragma once

#include "loom/parallel/pipeline/schedule.hpp"

namespace loom::parallel::pipeline {

// Throws loom::Error naming the first conflict, checked in this order:
//   1. sizes and ranges: one action list per rank, micro-batches, chunks and peers in range;
//   2. compute: every micro-batch forwarded and backwarded exactly once per chunk on every
//      rank, the backward after its forward;
//   3. transfers: each between neighbouring virtual stages and naming the right peer, none
//      twice; every forward (backward) that needs an activation (gradient) receives it before
//      it; every send after the compute whose output it carries; every receive matched by a
//      send on its peer ("rank 2: B3 waits for the gradient of micro-batch 3 that rank 3
//      never sends");
//   4. a simulated run completes without deadlock (see timeline.hpp).
void check_schedule(const Schedule& s);

}  // namespace loom::parallel::pipeline
