// Pipeline stage partitioning: the GPT's blocks cut into p x v contiguous virtual stages
// (v model chunks per rank when interleaved: virtual stage k lives on rank k % p as its
// chunk k / p, as in Megatron-LM), the embedding on the first and the final LayerNorm + LM
// head on the last, balanced so the most expensive stage is as cheap as possible.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/nn/gpt.hpp"

namespace loom::parallel::pipeline {

// The virtual stages in model order. blocks_per_stage (manual override, e.g. {3, 3, 2, 2})
// must have p * v entries summing to n_layer; empty: balanced by cost, a block costing 1
// and the LM head Vp / (12 C) (its GEMM FLOPs per token next to a block's). loom::Error when
// p * v exceeds the number of blocks or the override does not fit.
std::vector<nn::GPTStage> partition_stages(const nn::GPTConfig& config, int64_t p, int64_t v,
                                           const std::vector<int64_t>& blocks_per_stage = {});

}  // namespace loom::parallel::pipeline
