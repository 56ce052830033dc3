#include "loom/train/reshard.hpp"

#include <algorithm>
#include <cstring>

#include "loom/error.hpp"

namespace loom::train {

PieceLayout whole_piece(const Shape& full) { return PieceLayout{{}, 0, shape_numel(full)}; }

Shape slice_shape(const Shape& full, const nn::ShardSpec& spec, const std::string& what) {
  Shape local = full;
  if (spec.dim >= 0) {
    check(spec.dim < static_cast<int>(full.size()) && spec.parts >= 1 && spec.blocks >= 1 && spec.index >= 0 &&
              spec.index < spec.parts,
          what, ": slice (dim ", spec.dim, ", part ", spec.index, " of ", spec.parts, ", ", spec.blocks,
          " blocks) does not fit shape ", shape_str(full));
    check(spec.pad >= 0 && spec.pad < (int64_t{1} << 40), what, ": padding ", spec.pad, " is not a length");
    const int64_t len = full[static_cast<size_t>(spec.dim)] + spec.pad;  // the pieces' whole
    check(len % (spec.parts * spec.blocks) == 0 && (spec.pad == 0 || spec.blocks == 1), what, ": dim ", spec.dim,
          " of ", shape_str(full), (spec.pad > 0 ? " padded by " + std::to_string(spec.pad) : std::string()),
          " does not split into ", spec.parts, " parts of ", spec.blocks, " blocks");
    local[static_cast<size_t>(spec.dim)] = len / spec.parts;
  } else {
    check(spec.pad == 0, what, ": padding ", spec.pad, " without a split");
  }
  if (spec.dim2 >= 0) {  // a 3D-parallel weight's second split, along the last dimension
    check(spec.pad2 >= 0 && spec.pad2 < (int64_t{1} << 40), what, ": padding ", spec.pad2, " is not a length");
    const int64_t len = full.empty() ? 0 : full.back() + spec.pad2;
    check(spec.dim2 > spec.dim && static_cast<size_t>(spec.dim2) + 1 == full.size() && spec.parts2 >= 1 &&
              spec.index2 >= 0 && spec.index2 < spec.parts2 && len % spec.parts2 == 0,
          what, ": second slice (dim ", spec.dim2, ", part ", spec.index2, " of ", spec.parts2, ") does not fit shape ",
          shape_str(full), (spec.pad2 > 0 ? " padded by " + std::to_string(spec.pad2) : std::string()));
    local.back() = len / spec.parts2;
  } else {
    check(spec.pad2 == 0, what, ": padding ", spec.pad2, " without a second split");
  }
  check(!spec.padded() || full.size() <= 2, what, ": padding on a tensor of ", full.size(), " dimensions");
  return local;
}

void check_piece(const Shape& full, const PieceLayout& piece, const std::string& what) {
  int64_t numel = 1;  // checked as it grows: a hostile shape must not overflow
  for (int64_t d : full) {
    check(d >= 0 && (d == 0 || numel <= (int64_t{1} << 50) / d), what, ": invalid shape ", shape_str(full));
    numel *= d;
  }
  const int64_t n = shape_numel(slice_shape(full, piece.spec, what));
  check(piece.begin >= 0 && piece.begin <= piece.end && piece.end <= n, what, ": element range [", piece.begin, ", ",
        piece.end, ") lies outside its slice of ", n, " elements");
}

std::vector<nn::ShardRun> piece_runs(const Shape& full, const PieceLayout& piece) {
  std::vector<nn::ShardRun> runs;
  for (const nn::ShardRun& r : nn::shard_runs(slice_shape(full, piece.spec, "piece"), piece.spec)) {
    // Clip the slice's run to [begin, end); local offsets become relative to begin.
    const int64_t lo = std::max(r.local_offset, piece.begin), hi = std::min(r.local_offset + r.n, piece.end);
    if (lo < hi) runs.push_back({lo - piece.begin, r.full_offset + (lo - r.local_offset), hi - lo});
  }
  return runs;
}

int64_t elements_in_tensor(const Shape& full, const PieceLayout& piece, int64_t below) {
  if (!piece.spec.padded() && below >= shape_numel(full)) return piece.numel();
  int64_t n = 0;
  for (const nn::ShardRun& r : piece_runs(full, piece)) n += std::max<int64_t>(0, std::min(r.full_offset + r.n, below) - r.full_offset);
  return n;
}

bool repadding_fits(const Shape& stored, const Shape& wanted, int64_t padded_past_row) {
  return padded_past_row > 0 && stored.size() == wanted.size() && !stored.empty() &&
         std::equal(stored.begin() + 1, stored.end(), wanted.begin() + 1) && stored[0] >= padded_past_row &&
         wanted[0] >= padded_past_row;
}

std::vector<nn::ShardRun> overlap(const Shape& full, const PieceLayout& src, const PieceLayout& dst) {
  return overlap(full, src, full, dst);
}

std::vector<nn::ShardRun> overlap(const Shape& src_full, const PieceLayout& src, const Shape& dst_full,
                                  const PieceLayout& dst) {
  const std::vector<nn::ShardRun> a = piece_runs(src_full, src), b = piece_runs(dst_full, dst);
  std::vector<nn::ShardRun> out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {  // both sorted by full offset: a merge
    const int64_t a_end = a[i].full_offset + a[i].n, b_end = b[j].full_offset + b[j].n;
    const int64_t lo = std::max(a[i].full_offset, b[j].full_offset), hi = std::min(a_end, b_end);
    if (lo < hi)
      out.push_back({a[i].local_offset + (lo - a[i].full_offset), b[j].local_offset + (lo - b[j].full_offset), hi - lo});
    if (a_end <= b_end)
      ++i;
    else
      ++j;
  }
  return out;
}

int64_t copy_overlap(const Shape& full, const PieceLayout& src, const float* src_data, const PieceLayout& dst,
                     float* dst_data) {
  return copy_overlap(full, src, src_data, full, dst, dst_data);
}

int64_t copy_overlap(const Shape& src_full, const PieceLayout& src, const float* src_data, const Shape& dst_full,
                     const PieceLayout& dst, float* dst_data) {
  int64_t copied = 0;
  for (const nn::ShardRun& r : overlap(src_full, src, dst_full, dst)) {
    std::memcpy(dst_data + r.full_offset, src_data + r.local_offset, sizeof(float) * static_cast<size_t>(r.n));
    copied += r.n;
  }
  return copied;
}

void check_tiling(const std::string& name, const Shape& full, const std::vector<PieceLayout>& pieces) {
  std::vector<nn::ShardRun> runs;
  for (const PieceLayout& p : pieces) {
    const std::vector<nn::ShardRun> r = piece_runs(full, p);
    runs.insert(runs.end(), r.begin(), r.end());
  }
  std::sort(runs.begin(), runs.end(), [](const nn::ShardRun& x, const nn::ShardRun& y) { return x.full_offset < y.full_offset; });
  int64_t next = 0;  // every element before it is covered once
  for (const nn::ShardRun& r : runs) {
    if (r.n == 0) continue;
    check(r.full_offset <= next, "tensor '", name, "' ", shape_str(full), ": elements [", next, ", ", r.full_offset,
          ") are in no piece");
    check(r.full_offset == next, "tensor '", name, "' ", shape_str(full), ": elements [", r.full_offset, ", ",
          std::min(next, r.full_offset + r.n), ") are in two pieces");
    next = r.full_offset + r.n;
  }
  check(next == shape_numel(full), "tensor '", name, "' ", shape_str(full), ": elements [", next, ", ",
        shape_numel(full), ") are in no piece");
}

}  // namespace loom::train
