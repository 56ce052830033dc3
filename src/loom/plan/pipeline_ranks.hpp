// What each pipeline rank of a layout holds of a model, as the trainer partitions it
// (parallel::pipeline::partition_stages: the blocks balanced by cost with the LM head on the last
// stage costing V / 12h blocks; chunk k of rank r is virtual stage k pp + r), and the schedule
// it runs (1F1B, interleaved over `chunks`): the planner prices the rank that needs the most.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "loom/nn/gpt.hpp"
#include "loom/parallel/pipeline/schedule.hpp"
#include "loom/plan/rank_memory_terms.hpp"
#include "loom/plan/specs.hpp"
#include "loom/plan/step_time.hpp"

namespace loom::plan {

struct RankStages {
  std::vector<nn::GPTStage> chunks;  // this rank's virtual stages, chunk order
  int64_t blocks = 0, moe_blocks = 0;  // over every chunk; moe_blocks: the mixtures of experts among them
  bool embedding = false, head = false;
};

// The mixtures of experts among stage s's blocks (block b when b + 1 is a multiple of `every`).
int64_t moe_blocks(const ModelSpec& model, const nn::GPTStage& s);

// Every pipeline rank's stages (one rank holding the whole model when pp is 1).
std::vector<RankStages> rank_stages(const ModelSpec& model, const Layout& layout);

// The parameters of a pipeline rank holding the stages `s`, as the trainer builds them
// (rank_memory_terms.hpp; Linears split over tp).
RankParameters rank_parameters_of(const ModelSpec& model, const Layout& layout, const RankStages& s);

// The schedule a layout's pipeline runs over m micro-batches: 1F1B (GPipe with layout.gpipe),
// interleaved with chunks > 1, built for at most pp (1F1B) or 3 pp (interleaved) micro-batches,
// which reach every peak a longer run reaches (a bounded list for the search); GPipe's for all m.
// None without a pipeline.
std::optional<parallel::pipeline::Schedule> planned_schedule(const Layout& layout, int64_t micro_batches);

}  // namespace loom::plan
