#include "loom/comm/mesh_layout.hpp"

#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "loom/error.hpp"

namespace loom::comm {

namespace {
std::string product_text(const std::vector<MeshDim>& dims) {
  std::ostringstream os;
  for (size_t i = 0; i < dims.size(); ++i) os << (i ? " x " : "") << dims[i].name << "(" << dims[i].size << ")";
  return os.str();
}
}  // namespace

MeshLayout::MeshLayout(std::vector<MeshDim> dims, int world_size) : dims_(std::move(dims)), world_size_(world_size) {
  check(!dims_.empty(), "a device mesh needs at least one dimension");
  const std::string product = product_text(dims_);
  std::set<std::string> names;
  int64_t total = 1;
  for (const MeshDim& d : dims_) {
    check(!d.name.empty(), "mesh dimension names must not be empty");
    check(names.insert(d.name).second, "mesh dimension '", d.name, "' appears twice in ", product);
    check(d.size >= 1, "mesh degree ", d.name, "(", d.size, ") must be >= 1 in ", product);
    total *= d.size;
  }
  check(total == world_size, product, " = ", total, " != world size ", world_size);
}

int MeshLayout::index(const std::string& dim) const {
  for (size_t i = 0; i < dims_.size(); ++i)
    if (dims_[i].name == dim) return static_cast<int>(i);
  fail("mesh ", describe(), " has no dimension '", dim, "'");
}

std::vector<int> MeshLayout::coordinates(int rank) const {
  std::vector<int> c(dims_.size());
  for (int i = static_cast<int>(dims_.size()) - 1; i >= 0; --i) {
    c[i] = rank % dims_[i].size;
    rank /= dims_[i].size;
  }
  return c;
}

int MeshLayout::rank_at(const std::vector<int>& coordinates) const {
  check(coordinates.size() == dims_.size(), "mesh coordinates need ", dims_.size(), " entries");
  int r = 0;
  for (size_t i = 0; i < dims_.size(); ++i) r = r * dims_[i].size + coordinates[i];
  return r;
}

int MeshLayout::group_color(int rank, const std::vector<int>& varying) const {
  std::vector<int> c = coordinates(rank);
  for (int v : varying) c[v] = 0;
  return rank_at(c);
}

std::vector<std::vector<int>> MeshLayout::groups_along(const std::vector<int>& varying) const {
  std::map<int, std::vector<int>> by_color;
  for (int r = 0; r < world_size_; ++r) by_color[group_color(r, varying)].push_back(r);
  std::vector<std::vector<int>> out;
  for (auto& [color, ranks] : by_color) out.push_back(ranks);
  return out;
}

std::string MeshLayout::describe() const { return product_text(dims_); }

std::string MeshLayout::rank_map() const {
  std::ostringstream os;
  os << "mesh " << describe() << " over " << world_size_ << " ranks (" << dims_.back().name << " varies fastest)\n";
  char cell[32];
  os << "rank";
  for (const MeshDim& d : dims_) {
    std::snprintf(cell, sizeof cell, " %4s", d.name.c_str());
    os << cell;
  }
  os << "\n";
  for (int r = 0; r < world_size_; ++r) {
    std::snprintf(cell, sizeof cell, "%4d", r);
    os << cell;
    for (int c : coordinates(r)) {
      std::snprintf(cell, sizeof cell, " %4d", c);
      os << cell;
    }
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
