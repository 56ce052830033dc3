// Where each rank runs when a node has more ranks than cores (trying a 4-rank layout on a
// 2-core laptop). Ranks that wait in MPI keep polling (Open MPI's yield_when_idle), so the OS
// counts them as load and never moves the ranks that have work away from each other: when
// both ranks of one pipeline stage land on one core, every phase in which only that stage
// works runs at half speed (dp 2 x pp 2 on 2 cores: 0.052 s a step spread, 0.075 s not).
// So each rank is pinned to one core, the ranks of each stage on different cores.
#pragma once

#include <string>
#include <vector>

#include "loom/comm/mesh_layout.hpp"
#include "loom/comm/process_group.hpp"

namespace loom::comm {

// For each of `node_ranks` (world ranks on one node, any order), the index of the core it
// gets among `cores`: ranks ordered by pipeline stage, then the other coordinates of
// `layout` (its dimension "pp" if it has one), dealt round-robin. Pure.
std::vector<int> spread_stages_over_cores(const MeshLayout& layout, const std::vector<int>& node_ranks, int cores);

// The CPUs this process may run on (its affinity mask), in increasing order.
std::vector<int> allowed_cpus();

// Collective over the world (every rank calls it): when this node's ranks may all run on
// the same CPUs (the launcher did not bind them) and outnumber them, pins every thread of this
// process (and the threads it starts later) to the CPU spread_stages_over_cores gives it.
// Returns what it did for the log, e.g. "4 ranks on 2 cores: pinned rank 0 to CPU 0", or ""
// when it left the placement alone.
std::string pin_ranks_when_oversubscribed(const MeshLayout& layout, const ProcessGroup& world);

}  // namespace loom::comm
