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
  // A dimension spanning every rank is the caller's world group, which outlives the mesh:
  // the activation dtype a run set on it (activation_wire.hpp) ends with the mesh.
  ~DeviceMesh() { world_.set_activation_dtype(DType::F32); }
  DeviceMesh(const DeviceMesh&) = delete;
  DeviceMesh& operator=(const DeviceMesh&) = delete;

  const MeshLayout& layout() const { return layout_; }
  int rank() const { return world_.rank(); }
  int size(const std::string& dim) const { return layout_.size(dim); }
  int coordinate(const std::string& dim) const { return layout_.coordinates(rank())[layout_.index(dim)]; }

  // The ranks that differ from this one only along `dim`, ordered by their coordinate on it;
  // or a named group (split_dim, add_position_group).
  ProcessGroup& group(const std::string& name);
  // The ranks that differ only along the listed dimensions (e.g. {"dp", "tp"}); collective
  // over the world, so every rank must ask for the same groups in the same order.
  std::unique_ptr<ProcessGroup> make_group(const std::vector<std::string>& dims);

  // Collective over the world, like everything below. Splits dimension `dim` (of size
  // outer x inner_size, the inner part varying fastest) into two named axes with a group
  // each: HSDP's dp becomes "replicate" x "shard", a shard group being neighbouring dp ranks.
  void split_dim(const std::string& dim, const std::string& outer, const std::string& inner, int inner_size);
  // A named group of the ranks at `positions` along `dim` that share every other coordinate
  // (the tied token table's: the first and last pipeline stage); any other rank gets a
  // group of its own under that name.
  void add_position_group(const std::string& name, const std::string& dim, const std::vector<int>& positions);
  // A named group over several dimensions (3D tensor parallelism's "batch" = dp x depth);
  // over one dimension, another name for that axis's group.
  void add_group(const std::string& name, const std::vector<std::string>& dims);

 private:
  ProcessGroup& world_;
  MeshLayout layout_;
  std::map<std::string, std::unique_ptr<ProcessGroup>> owned_;
  // By name: a dimension spanning every rank is the world itself (no second communicator).
  std::map<std::string, ProcessGroup*> groups_;
  void add(const std::string& name, std::unique_ptr<ProcessGroup> group);
};

}  // namespace loom::comm
