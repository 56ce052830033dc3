// Gathers one string from every rank of a group onto a root, for the files rank 0 writes
// about the whole job (the merged trace, per-rank memory). Point-to-point on the group, the
// bytes carried in floats (MPI copies them bit for bit), so any length and content pass.
#pragma once

#include <string>
#include <vector>

#include "loom/comm/process_group.hpp"

namespace loom::comm {

// Collective over group: root gets every rank's text in rank order; the others get {}.
std::vector<std::string> gather_text(ProcessGroup& group, const std::string& text, int root = 0);

}  // namespace loom::comm
