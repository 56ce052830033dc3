// DeviceMesh: a MeshLayout made real over the world's ranks: one process group per
// dimension, and groups over several dimensions on request. Every parallel component takes
// its sub-group from here. The layout is validated on every rank before any communication,
// so a bad shape is an error everywhere and never a hang.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/comm/mesh_layout.hpp"
#include "loom/comm/process_group.hpp"

namespace loom::comm {

class DeviceMesh {
 public:
  // Collective over world: creates one sub-group per dimension.
  DeviceMesh(ProcessGroup& world, std::vector<MeshDim> dims);

  const MeshLayout& layout() const { return layout_; }
  int rank() const { return world_.rank(); }
  int size(const std::string& dim) const { return layout_.size(dim); }
  int coordinate(const std::string& dim) const { return layout_.coordinates(rank())[layout_.index(dim)]; }

  // The ranks that differ from this one only along `dim`, ordered by their coordinate on it.
  ProcessGroup& group(const std::string& dim);
  // The ranks that differ only along the listed dimensions (e.g. {"dp", "tp"}); collective
  // over the world, so every rank must ask for the same groups in the same order.
  std::unique_ptr<ProcessGroup> make_group(const std::vector<std::string>& dims);

 private:
  ProcessGroup& world_;
  MeshLayout layout_;
  std::map<std::string, std::unique_ptr<ProcessGroup>> groups_;
};

}  // namespace loom::comm
