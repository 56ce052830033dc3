// Re-sharding: any rank's piece of a logical (serial-layout) tensor is assembled from the
// pieces a checkpoint holds, whatever layout wrote them. A piece is the flat element range
// [begin, end) of a tensor-parallel slice (a ShardSpec) of the full tensor: a tp slice is
// [0, numel of the slice), a ZeRO shard a sub-range of its parameter, a whole tensor has no
// spec. Both sides map to offsets in the full tensor, so one code path serves every pair
// of layouts; pieces are copied run by run and never materialise the full tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/nn/shard_runs.hpp"

namespace loom::train {

struct PieceLayout {
  nn::ShardSpec spec;  // the tensor-parallel slice (default: the whole tensor)
  int64_t begin = 0;   // flat element range within that slice
  int64_t end = 0;
  int64_t numel() const { return end - begin; }
};

// The whole tensor of `full` shape as one piece.
PieceLayout whole_piece(const Shape& full);
// The slice's shape; loom::Error naming `what` when spec does not fit the full shape.
Shape slice_shape(const Shape& full, const nn::ShardSpec& spec, const std::string& what);
// loom::Error naming `what` unless the piece lies inside the full tensor (hostile manifests).
void check_piece(const Shape& full, const PieceLayout& piece, const std::string& what);

// The piece's runs: offsets in the full tensor (increasing) and in the piece's data.
std::vector<nn::ShardRun> piece_runs(const Shape& full, const PieceLayout& piece);
// How many of the piece's elements belong to the full tensor: all but its padding (ShardSpec::pad);
// of those, only the ones before flat offset `below` of the full tensor.
int64_t elements_in_tensor(const Shape& full, const PieceLayout& piece, int64_t below = INT64_MAX);

// The elements src and dst share: n elements at local_offset of src and full_offset of dst
// (ShardRun's fields reused: local_offset = in src, full_offset = in dst).
std::vector<nn::ShardRun> overlap(const Shape& full, const PieceLayout& src, const PieceLayout& dst);
// Copies the shared elements from src_data to dst_data; returns how many.
int64_t copy_overlap(const Shape& full, const PieceLayout& src, const float* src_data, const PieceLayout& dst,
                     float* dst_data);

// Re-padding: a full tensor of shape `stored` whose rows from `padded_past_row` on are padding
// fills one of shape `wanted` when the two differ only in their number of rows and both hold
// every row that counts (a token table padded for another tp). Row-major, so a row's elements
// sit at the same flat offsets in both: src and dst pieces meet on the rows both tensors have.
bool repadding_fits(const Shape& stored, const Shape& wanted, int64_t padded_past_row);
std::vector<nn::ShardRun> overlap(const Shape& src_full, const PieceLayout& src, const Shape& dst_full,
                                  const PieceLayout& dst);
int64_t copy_overlap(const Shape& src_full, const PieceLayout& src, const float* src_data, const Shape& dst_full,
                     const PieceLayout& dst, float* dst_data);

// loom::Error naming the tensor and the first element range covered by no piece or by two,
// unless the pieces tile the full tensor exactly.
void check_tiling(const std::string& name, const Shape& full, const std::vector<PieceLayout>& pieces);

}  // namespace loom::train
