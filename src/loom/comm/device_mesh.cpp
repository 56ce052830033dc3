#include "loom/comm/device_mesh.hpp"

#include <algorithm>

#include "loom/error.hpp"

namespace loom::comm {

DeviceMesh::DeviceMesh(ProcessGroup& world, std::vector<MeshDim> dims)
    : world_(world), layout_(std::move(dims), world.size()) {
  for (const MeshDim& d : layout_.dims()) {
    if (d.size == world.size())
      groups_[d.name] = &world;
    else
      add(d.name, make_group({d.name}));
  }
}

void DeviceMesh::add(const std::string& name, std::unique_ptr<ProcessGroup> group) {
  groups_[name] = group.get();
  owned_[name] = std::move(group);
}

ProcessGroup& DeviceMesh::group(const std::string& name) {
  auto it = groups_.find(name);
  if (it == groups_.end()) layout_.index(name);  // names the mesh in the error for an unknown dimension
  return *it->second;
}

void DeviceMesh::split_dim(const std::string& dim, const std::string& outer, const std::string& inner, int inner_size) {
  const int d = layout_.index(dim), n = layout_.dims()[d].size;
  check(inner_size >= 1 && n % inner_size == 0, "cannot split mesh dimension ", dim, "(", n, ") into ", outer, " x ",
        inner, "(", inner_size, "): ", inner_size, " does not divide ", n);
  std::vector<MeshDim> dims = layout_.dims();
  dims[d] = {inner, inner_size};
  dims.insert(dims.begin() + d, {outer, n / inner_size});
  const MeshLayout finer(dims, world_.size());
  for (const std::string& name : {outer, inner})
    add(name, world_.split(finer.group_color(rank(), {finer.index(name)}), rank(), name));
}

void DeviceMesh::add_position_group(const std::string& name, const std::string& dim, const std::vector<int>& positions) {
  const int d = layout_.index(dim);
  const bool member = std::find(positions.begin(), positions.end(), coordinate(dim)) != positions.end();
  // Members share the colour of their line along dim; the rest get colours no line uses.
  const int color = member ? layout_.group_color(rank(), {d}) : world_.size() + rank();
  add(name, world_.split(color, rank(), name));
}

void DeviceMesh::add_group(const std::string& name, const std::vector<std::string>& dims) {
  if (dims.size() == 1) {
    groups_[name] = &group(dims.front());
    return;
  }
  add(name, make_group(dims));
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
