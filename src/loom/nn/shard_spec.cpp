#include "loom/nn/shard_spec.hpp"
#include "loom/nn/shard_runs.hpp"

#include <algorithm>
#include <cstring>

#include "loom/error.hpp"

namespace loom::nn {

namespace {

// The pieces' whole, padding included.
Shape padded_shape(const Shape& local, const ShardSpec& spec) {
  Shape full = local;
  if (spec.dim >= 0) full.at(static_cast<size_t>(spec.dim)) *= spec.parts;
  if (spec.dim2 >= 0) full.at(static_cast<size_t>(spec.dim2)) *= spec.parts2;
  return full;
}

}  // namespace

Shape ShardSpec::full_shape(const Shape& local) const {
  Shape full = padded_shape(local, *this);
  if (dim >= 0) full.at(static_cast<size_t>(dim)) -= pad;
  if (dim2 >= 0) full.at(static_cast<size_t>(dim2)) -= pad2;
  return full;
}

namespace {

// Calls copy(local_offset, full_offset, n) for every contiguous run of the piece split along
// spec.dim alone.
template <class F>
void for_each_run_1d(const Shape& local, const ShardSpec& spec, F&& copy) {
  if (!(spec.dim >= 0 && spec.parts > 1)) {
    copy(0, 0, shape_numel(local));
    return;
  }
  const size_t d = static_cast<size_t>(spec.dim);
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < d; ++i) outer *= local[i];
  for (size_t i = d + 1; i < local.size(); ++i) inner *= local[i];
  const int64_t local_len = local[d], full_len = local_len * spec.parts;
  check(local_len % spec.blocks == 0, "shard of ", local_len, " along dim ", spec.dim, " is not divisible into ",
        spec.blocks, " blocks");
  const int64_t per_block = local_len / spec.blocks;  // this rank's rows of each block
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t b = 0; b < spec.blocks; ++b) {
      const int64_t local_row = b * per_block;
      const int64_t full_row = b * per_block * spec.parts + spec.index * per_block;
      copy((o * local_len + local_row) * inner, (o * full_len + full_row) * inner, per_block * inner);
    }
}

// Every contiguous run of the piece; with a second split along the last dimension, the runs
// of the first split (in the tensor whose last dimension is still local) cut into rows, each
// placed at its column offset.
template <class F>
void for_each_padded_run(const Shape& local, const ShardSpec& spec, F&& copy) {
  if (spec.dim2 < 0) return for_each_run_1d(local, spec, copy);
  check(static_cast<size_t>(spec.dim2) + 1 == local.size() && spec.dim < spec.dim2,
        "a second split must be along the last dimension, after the first");
  const int64_t cols = local.back(), full_cols = cols * spec.parts2;
  for_each_run_1d(local, spec, [&](int64_t l, int64_t f, int64_t n) {
    for (int64_t k = 0; k < n; k += cols) copy(l + k, (f + k) / cols * full_cols + spec.index2 * cols, cols);
  });
}

// The same runs inside the whole without padding: each padded run cut at the rows of the
// padded whole, its padding left out, its offsets moved to the unpadded whole.
template <class F>
void for_each_run(const Shape& local, const ShardSpec& spec, F&& copy) {
  if (!spec.padded()) return for_each_padded_run(local, spec, copy);
  check(local.size() == 1 || local.size() == 2, "a padded split needs a tensor of 1 or 2 dimensions, got ",
        shape_str(local));
  const Shape padded = padded_shape(local, spec), whole = spec.full_shape(local);
  check(whole[0] >= 0 && whole.back() >= 0, "padding ", spec.pad, ", ", spec.pad2, " exceeds the split of ",
        shape_str(padded));
  const int64_t rows = local.size() == 2 ? whole[0] : 1, cols = whole.back(), padded_cols = padded.back();
  for_each_padded_run(local, spec, [&](int64_t l, int64_t f, int64_t n) {
    while (n > 0) {
      const int64_t row = f / padded_cols, col = f % padded_cols, run = std::min(n, padded_cols - col);
      if (row < rows && col < cols) copy(l, row * cols + col, std::min(run, cols - col));
      l += run, f += run, n -= run;
    }
  });
}

}  // namespace

std::vector<ShardRun> shard_runs(const Shape& local, const ShardSpec& spec) {
  std::vector<ShardRun> runs;
  for_each_run(local, spec, [&](int64_t l, int64_t f, int64_t n) { runs.push_back({l, f, n}); });
  return runs;
}

namespace {

void check_shapes(const Tensor& full, const Tensor& local, const ShardSpec& spec) {
  check(full.shape() == spec.full_shape(local.shape()), "shard ", shape_str(local.shape()), " does not fit ",
        shape_str(full.shape()), " split ", spec.parts, " ways along dim ", spec.dim);
}

}  // namespace

void copy_shard(const Tensor& full, Tensor& local, const ShardSpec& spec) {
  check_shapes(full, local, spec);
  const float* src = full.f32();
  float* dst = local.f32();
  if (spec.padded()) std::fill(dst, dst + local.numel(), 0.0f);  // the padding is in no run
  for_each_run(local.shape(), spec, [&](int64_t l, int64_t f, int64_t n) {
    std::memcpy(dst + l, src + f, sizeof(float) * static_cast<size_t>(n));
  });
}

void place_shard(const Tensor& local, Tensor& full, const ShardSpec& spec) {
  check_shapes(full, local, spec);
  const float* src = local.f32();
  float* dst = full.f32();
  for_each_run(local.shape(), spec, [&](int64_t l, int64_t f, int64_t n) {
    std::memcpy(dst + f, src + l, sizeof(float) * static_cast<size_t>(n));
  });
}

}  // namespace loom::nn
