#include "loom/comm/device_mesh.hpp"

#include <algorithm>
#include <set>
#include <sstream>

#include "loom/error.hpp"

namespace loom::comm {

void DeviceMesh::validate(const std::vector<MeshDim>& dims, int world_size) {
  check(!dims.empty(), "a device mesh needs at least one dimension");
  std::ostringstream product;
  int64_t total = 1;
  std::set<std::string> names;
  for (size_t i = 0; i < dims.size(); ++i) {
    product << (i ? " x " : "") << dims[i].name << "(" << dims[i].size << ")";
    total *= dims[i].size;
  }
  for (const MeshDim& d : dims) {
    check(!d.name.empty(), "mesh dimension names must not be empty");
    check(names.insert(d.name).second, "mesh dimension '", d.name, "' appears twice in ", product.str());
    check(d.size >= 1, "mesh degree ", d.name, "(", d.size, ") must be >= 1 in ", product.str());
  }
  check(total == world_size, product.str(), " = ", total, " != world size ", world_size);
}

DeviceMesh::DeviceMesh(ProcessGroup& world, std::vector<MeshDim> dims) : world_(world), dims_(std::move(dims)) {
  validate(dims_, world_.size());
  for (size_t d = 0; d < dims_.size(); ++d) groups_[dims_[d].name] = make_group({dims_[d].name});
}

int DeviceMesh::index(const std::string& dim) const {
  for (size_t i = 0; i < dims_.size(); ++i)
    if (dims_[i].name == dim) return static_cast<int>(i);
  fail("mesh ", describe(), " has no dimension '", dim, "'");
}

int DeviceMesh::size(const std::string& dim) const { return dims_[index(dim)].size; }

std::vector<int> DeviceMesh::coordinates(int rank) const {
  std::vector<int> c(dims_.size());
  for (int i = static_cast<int>(dims_.size()) - 1; i >= 0; --i) {
    c[i] = rank % dims_[i].size;
    rank /= dims_[i].size;
  }
  return c;
}

int DeviceMesh::rank_at(const std::vector<int>& coordinates) const {
  check(coordinates.size() == dims_.size(), "mesh coordinates need ", dims_.size(), " entries");
  int r = 0;
  for (size_t i = 0; i < dims_.size(); ++i) r = r * dims_[i].size + coordinates[i];
  return r;
}

ProcessGroup& DeviceMesh::group(const std::string& dim) {
  index(dim);  // names the mesh in the error for an unknown dimension
  return *groups_.at(dim);
}

std::unique_ptr<ProcessGroup> DeviceMesh::make_group(const std::vector<std::string>& dims) {
  std::vector<int> varying;
  std::string name;
  for (const auto& d : dims) {
    varying.push_back(index(d));
    name += (name.empty() ? "" : "+") + d;
  }
  // Color: this rank's coordinates with the varying ones zeroed (identifies the group);
  // key: the rank, so members are ordered by their coordinates along the varying dims.
  std::vector<int> c = coordinates(rank());
  for (int v : varying) c[v] = 0;
  return world_.split(rank_at(c), rank(), name);
}

std::vector<std::vector<int>> DeviceMesh::groups_along(const std::vector<int>& varying) const {
  std::map<int, std::vector<int>> by_color;
  for (int r = 0; r < world_size(); ++r) {
    std::vector<int> c = coordinates(r);
    for (int v : varying) c[v] = 0;
    by_color[rank_at(c)].push_back(r);
  }
  std::vector<std::vector<int>> out;
  for (auto& [color, ranks] : by_color) out.push_back(ranks);
  return out;
}

std::string DeviceMesh::describe() const {
  std::ostringstream os;
  for (size_t i = 0; i < dims_.size(); ++i) os << (i ? " x " : "") << dims_[i].name << "(" << dims_[i].size << ")";
  return os.str();
}

std::string DeviceMesh::rank_map() const {
  std::ostringstream os;
  os << "mesh " << describe() << " over " << world_size() << " ranks (" << dims_.back().name << " varies fastest)\n";
  os << "rank";
  for (const MeshDim& d : dims_) os << " " << std::string(std::max<size_t>(0, 4 - d.name.size()), ' ') << d.name;
  os << "\n";
  for (int r = 0; r < world_size(); ++r) {
    os << std::string(r < 10 ? 3 : r < 100 ? 2 : 1, ' ') << r;
    for (int c : coordinates(r)) os << " " << std::string(c < 10 ? 3 : c < 100 ? 2 : 1, ' ') << c;
    os << "\n";
  }
  for (int i = static_cast<int>(dims_.size()) - 1; i >= 0; --i) {
    os << dims_[i].name << " groups:";
    for (const auto& g : groups_along({i})) {
      os << " [";
      for (size_t k = 0; k < g.size(); ++k) os << (k ? " " : "") << g[k];
      os << "]";
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace loom::comm
