// How the causal attention splits its work (attention.cpp, and its bf16 path in
// attention_bf16.cpp): query rows in causal blocks, heads in groups.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace loom::kernels {

// Rows per causal block. Short sequences use one block (the plain full product); longer ones
// use up to 8 blocks of >= 64 rows, which does ~(nb + 1) / (2 nb) of the full work while each
// GEMM stays big enough for oneDNN to run well. At T = 256, 4 blocks of 64 rows measured 7%
// (forward) and 20% (backward) faster than 8 blocks of 32: oneDNN's batched fp32 GEMM (gemm:jit,
// one small sgemm per head) ran those 32-row products at 40-60 GFLOP/s in the model.
inline int64_t attention_block_rows(int64_t T) {
  const int64_t nb = T >= 64 ? std::min<int64_t>(8, T / 64) : 1;
  return (T + nb - 1) / nb;
}

// Heads are processed in groups whose (T, T) score matrices together stay within
// kAttentionGroupBytes, so that the GEMM writing a block of scores, the softmax over it and the
// GEMM reading it back find it in the (shared) last-level cache. A group is either several
// whole sequences (all NH heads) or some heads of one sequence; either way its att slice is
// contiguous. 16 MiB measured a little faster than 1 or 4 MiB (fewer, larger GEMMs) and than no
// grouping at T = 1024; it is one group per 4 heads there and a single group for gpt-mini.
// (plan::kAttentionGroupBytes prices the same; a test keeps the two equal.)
constexpr int64_t kAttentionGroupBytes = int64_t{16} << 20;

struct AttentionGroup {
  int64_t b0, nb, h0, nh;  // sequences [b0, b0 + nb), heads [h0, h0 + nh)
};

// values_per_head: the fp32 scores a head holds at once, T * T where a group's whole score
// matrices exist (the fp32 path), a causal block's rows * T where only one block's do (the
// bf16 path, with its own budget_bytes).
inline std::vector<AttentionGroup> attention_groups(int64_t B, int64_t T, int64_t NH, int64_t values_per_head,
                                                    int64_t budget_bytes = kAttentionGroupBytes) {
  const int64_t heads = std::max<int64_t>(1, budget_bytes / (values_per_head * static_cast<int64_t>(sizeof(float))));
  std::vector<AttentionGroup> out;
  if (heads >= NH) {
    const int64_t nb = std::min(B, heads / NH);
    for (int64_t b0 = 0; b0 < B; b0 += nb) out.push_back({b0, std::min(nb, B - b0), 0, NH});
  } else {
    for (int64_t b0 = 0; b0 < B; ++b0)
      for (int64_t h0 = 0; h0 < NH; h0 += heads) out.push_back({b0, 1, h0, std::min(heads, NH - h0)});
  }
  return out;
}

}  // namespace loom::kernels
