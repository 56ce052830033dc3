// What the ranks of a grid agree on after each read its part of a graph: that none failed.
// Every rank reads the same file, so a bad record fails them all alike, each naming the file
// and line; anything else (memory, a file changed between reads) fails one, and the rest must
// not wait for it in their next collective.
#pragma once

#include <exception>
#include <string>
#include <vector>

#include "loom/comm/process_group.hpp"
#include "loom/parallel/tensor_parallel_3d/grid.hpp"

namespace loom::parallel::graph3d {

// v reduced by op over the whole grid (its three axes in turn).
void reduce_over_grid(const tp3d::Grid3D& grid, std::vector<float>& v, comm::ReduceOp op);

// Collective over the grid: rethrows this rank's error (failed, when set), else fails when
// another rank had one, naming that grid rank (the highest, when several) and what they read
// ("the edges of g").
void agree_on_read(const tp3d::Grid3D& grid, const std::exception_ptr& failed, const std::string& what);

}  // namespace loom::parallel::graph3d
