// What ZeRO holds whole for a while in a step, beyond the sharded state, counted once for the
// trainer's memory check (train/memory_budget.cpp), `loom train --dry-run` and the planner
// (layout_cost.cpp): stage 3's gathered units (parallel/zero.cpp: a chunk's root unit from its
// forward to the end of its backward, the block computing and the one prefetched, a bf16 unit's bf16
// buffer beside its fp32 widening) and, in stages 2-3, the full gradient of each unit from its
// backward to the end of its reduce-scatter. The tracker files both under
// MemoryCategory::Gathered; tests/parallel/test_zero_gathered.cpp holds its peak to this count.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/nn/gpt.hpp"
#include "loom/parallel/pipeline/schedule.hpp"
#include "loom/plan/rank_memory_terms.hpp"

namespace loom::plan {

// One of ZeRO's units, in elements before padding, and whether it is all-gathered as bf16 (under
// bf16 gathers, all but the routers' weights) or as fp32.
struct ZeroUnit {
  int64_t elements = 0;
  bool bf16 = false;
};

// One module's units, in the order ZeRO builds them (parallel/zero.cpp: the bf16 one, a
// router's fp32 one, a pipeline's tied token table in its own).
struct ZeroModule {
  std::vector<ZeroUnit> units;
};

// A chunk's modules: its blocks in forward order, then its other parameters (the token table,
// the position table, the final LayerNorm).
struct ZeroChunkModules {
  std::vector<ZeroModule> blocks;
  ZeroModule root;
};

// The modules a rank's ZeRO makes units of, chunk by chunk (one without a pipeline).
struct ZeroModules {
  std::vector<ZeroChunkModules> chunks;
};

// The parameters outside a rank's (or chunk's) blocks, ZeRO's root units: the token table
// (`table` elements, tied: once where both ends are held), the position table on the embedding's
// end, the final LayerNorm on the head's.
int64_t root_unit_parameters(int64_t table, int64_t position_table, int64_t hidden, bool embedding, bool head);

// As the GPT builds them over the chunks a rank owns (rank_parameters' counts, block by block):
// each block's Linears (`linears`) and LayerNorms; a mixture of experts' router, kept in fp32,
// and its E experts without ep (under ep, expert parallelism keeps them out of ZeRO). Gathered
// in bf16 under bf16 gathers (shape.bf16). A chunk holding one end of a pipeline (the token
// table's stage, or the head's) keeps the table in a unit of its own.
ZeroModules zero_modules(const RankShape& shape, const std::vector<nn::GPTStage>& chunks, const BlockLinears& linears);

// The most ZeRO stage `stage` over `shards` ranks holds of `modules` at once in a step, in
// bytes, walking the trainer's hooks moment by moment: each unit padded to a multiple of
// shards; gathered, 4 bytes an element in fp32 and 6 in bf16 (its bf16 buffer and the fp32
// values widened from it; 2 while a prefetched gather is in flight); each unit's full fp32
// gradient from its module's backward until its reduce-scatter completes, at most
// ShardedDataParallel::kMaxReductionsInFlight behind, so a micro-batch's last ones (the first
// block's and the root's) are still held in the next one. The step is `actions` (a pipeline
// rank's schedule: each forward and backward of a chunk, in order) or, without one,
// `micro_batches` forward-backward pairs of the one chunk. Stage 3 frees a unit after each
// forward and backward, or (reshard_each_micro_batch false: zero3_reshard = 'step') only after its
// chunk's last backward of the step. 0 below stage 2.
int64_t zero_gathered_bytes(const ZeroModules& modules, int64_t shards, int stage, int64_t micro_batches,
                            const std::vector<parallel::pipeline::Action>* actions = nullptr,
                            bool reshard_each_micro_batch = true);

}  // namespace loom::plan
