#include "loom/parallel/graph_3d/read_agreement.hpp"

#include "loom/error.hpp"

namespace loom::parallel::graph3d {

void reduce_over_grid(const tp3d::Grid3D& grid, std::vector<float>& v, comm::ReduceOp op) {
  if (v.empty()) return;
  for (const tp3d::Axis a : {tp3d::Axis::Row, tp3d::Axis::Col, tp3d::Axis::Depth})
    if (grid.size(a) > 1) grid.group(a).all_reduce(v.data(), static_cast<int64_t>(v.size()), op);
}

void agree_on_read(const tp3d::Grid3D& grid, const std::exception_ptr& failed, const std::string& what) {
  std::vector<float> failing = {failed ? static_cast<float>(grid.grid_rank() + 1) : 0.0f};
  reduce_over_grid(grid, failing, comm::ReduceOp::Max);
  if (failed) std::rethrow_exception(failed);
  check(failing[0] == 0.0f, "grid rank ", static_cast<int>(failing[0]) - 1, " failed reading ", what,
        " (its error says why); this rank read them without one");
}

}  // namespace loom::parallel::graph3d
