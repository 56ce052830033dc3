// DeviceMesh: the world's ranks arranged in named dimensions (dp x pp x tp, later cp, ep),
// the last listed varying fastest, so neighbouring ranks share a tensor-parallel group as
// GPUs of one node would. Every parallel component takes its sub-group from here; the
// shape is validated on every rank before any communication, so a bad layout is an error
// everywhere and never a hang.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/comm/process_group.hpp"

namespace loom::comm {

struct MeshDim {
  std::string name;
  int size;
};

class DeviceMesh {
 public:
  // Collective over world: creates one sub-group per dimension.
  DeviceMesh(ProcessGroup& world, std::vector<MeshDim> dims);

  // Throws loom::Error naming every degree, e.g. "dp(2) x pp(2) x tp(3) = 12 != world size 8".
  static void validate(const std::vector<MeshDim>& dims, int world_size);

  int rank() const { return world_.rank(); }
  int world_size() const { return world_.size(); }
  const std::vector<MeshDim>& dims() const { return dims_; }
  int size(const std::string& dim) const;
  int coordinate(const std::string& dim) const { return coordinates(rank())[index(dim)]; }
  std::vector<int> coordinates(int rank) const;
  int rank_at(const std::vector<int>& coordinates) const;

  // The ranks that differ from this one only along `dim`, ordered by their coordinate on it.
  ProcessGroup& group(const std::string& dim);
  // The ranks that differ only along the listed dimensions (e.g. {"dp", "tp"}); collective
  // over the world, so every rank must ask for the same groups in the same order.
  std::unique_ptr<ProcessGroup> make_group(const std::vector<std::string>& dims);

  // A table of every rank's coordinates and the groups of each dimension.
  std::string rank_map() const;
  // "dp(2) x pp(2) x tp(2)"
  std::string describe() const;

 private:
  int index(const std::string& dim) const;
  // Ranks sharing all coordinates except `varying`, for each such set, in rank order.
  std::vector<std::vector<int>> groups_along(const std::vector<int>& varying) const;

  ProcessGroup& world_;
  std::vector<MeshDim> dims_;
  std::map<std::string, std::unique_ptr<ProcessGroup>> groups_;
};

}  // namespace loom::comm
