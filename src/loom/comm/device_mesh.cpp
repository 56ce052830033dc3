#include "loom/comm/device_mesh.hpp"

namespace loom::comm {

DeviceMesh::DeviceMesh(ProcessGroup& world, std::vector<MeshDim> dims)
    : world_(world), layout_(std::move(dims), world.size()) {
  for (const MeshDim& d : layout_.dims()) groups_[d.name] = make_group({d.name});
}

ProcessGroup& DeviceMesh::group(const std::string& dim) {
  layout_.index(dim);  // names the mesh in the error for an unknown dimension
  return *groups_.at(dim);
}

std::unique_ptr<ProcessGroup> DeviceMesh::make_group(const std::vector<std::string>& dims) {
  std::vector<int> varying;
  std::string name;
  for (const auto& d : dims) {
    varying.push_back(layout_.index(d));
    name += (name.empty() ? "" : "+") + d;
  }
  // Color identifies the group; key = world rank orders members by their coordinates.
  return world_.split(layout_.group_color(rank(), varying), rank(), name);
}

}  // namespace loom::comm
