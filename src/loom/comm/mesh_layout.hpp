// MeshLayout: the arithmetic of a device mesh without any communication: named dimensions,
// the last varying fastest (tp last, so neighbouring ranks share a tensor-parallel group as
// GPUs of one node would), rank <-> coordinates, and the groups along any dimensions. Pure,
// so `loom train --dry-run` can print the rank map of a layout before any process starts.
#pragma once

#include <string>
#include <vector>

namespace loom::comm {

struct MeshDim {
  std::string name;
  int size;
};

class MeshLayout {
 public:
  // Throws loom::Error naming every degree, e.g. "dp(2) x pp(2) x tp(3) = 12 != world size 8".
  MeshLayout(std::vector<MeshDim> dims, int world_size);

  const std::vector<MeshDim>& dims() const { return dims_; }
  int world_size() const { return world_size_; }
  int index(const std::string& dim) const;  // throws for an unknown name
  int size(const std::string& dim) const { return dims_[index(dim)].size; }
  std::vector<int> coordinates(int rank) const;
  int rank_at(const std::vector<int>& coordinates) const;
  // For each set of ranks that differ only along the dimensions `varying` (indices), its
  // ranks in increasing order; sets ordered by their first rank.
  std::vector<std::vector<int>> groups_along(const std::vector<int>& varying) const;
  // The rank that identifies rank's group along `varying` (its coordinates there zeroed).
  int group_color(int rank, const std::vector<int>& varying) const;

  // "dp(2) x pp(2) x tp(2)"
  std::string describe() const;
  // A table of every rank's coordinates and the groups of each dimension.
  std::string rank_map() const;

 private:
  std::vector<MeshDim> dims_;
  int world_size_;
};

}  // namespace loom::comm
