// How a parameter is split across a group of ranks: along `dim`, into `parts` pieces,
// this rank holding piece `index`. `blocks` > 1 splits each of that many equal blocks of the
// dimension separately (a fused QKV weight: every rank takes its slice of q,
// of k and of v).
// A parameter with dim < 0 is whole on every rank (replicated).
// `axis` names the ranks the pieces are spread over: the tensor-parallel group, or (a
// mixture of experts' stacked expert weights) the expert-parallel group.
// 3D tensor parallelism splits a weight twice: a second split along the last
// dimension `dim2` (> dim) into `parts2` pieces, this rank holding piece `index2`;
// and several ranks of the group may hold the same piece: `replica` numbers them
// (replica 0 counts the piece in norms, the others hold copies).
// A layout may pad a split dimension so its pieces are equal (a 3D-parallel GCN pads widths
// to its grid): `pad` (`pad2`) zeros end dim (dim2) of the pieces' whole and are not part of
// the tensor. The whole tensor (full_shape, checkpoints) leaves them out, and a piece's
// padding stays 0 when a whole is copied into it. Tensors of at most 2 dimensions.
#pragma once

#include <cstdint>

#include "loom/tensor/tensor.hpp"

namespace loom::nn {

struct ShardSpec {
  int dim = -1;
  int64_t parts = 1;
  int64_t index = 0;
  int64_t blocks = 1;
  int dim2 = -1;
  int64_t parts2 = 1;
  int64_t index2 = 0;
  int64_t replica = 0;
  static constexpr int kTensorAxis = 0, kExpertAxis = 1;
  int axis = kTensorAxis;
  int64_t pad = 0, pad2 = 0;

  bool sharded() const { return (dim >= 0 && parts > 1) || (dim2 >= 0 && parts2 > 1); }
  bool padded() const { return pad > 0 || pad2 > 0; }
  // The full tensor's shape, given this rank's piece's (without the padding).
  Shape full_shape(const Shape& local) const;
};

// local = this rank's piece of full (shapes as the spec says).
void copy_shard(const Tensor& full, Tensor& local, const ShardSpec& spec);
// The inverse: writes local into its place in full.
void place_shard(const Tensor& local, Tensor& full, const ShardSpec& spec);

}  // namespace loom::nn
