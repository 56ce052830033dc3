// 3D tensor-parallel layouts in the planner (AxoNN's 4D hybrid: dp x row x col x depth, and
// pipelines of such grids and rings around them): their memory and step time, priced with the
// same device and link model as the 1D layouts (step_time.hpp), and their enumeration for
// `loom plan --tp-3d on`.
//
// How Loom lays a GPT out on a grid (parallel/tensor_parallel_3d): each block's four linear
// layers split over row x col and their weights sharded over depth; attention's heads split
// over row (replicated over col); LayerNorms, residuals, embeddings and the tied LM head
// replicated on the whole features of the rank's rows; the batch split over dp x depth. So a
// rank runs GEMMs of 1/(R C) of a layer's weight on its micro-batch, attention on heads / R,
// and the LM head whole. Its collectives move the bytes tensor_parallel_3d_cost.hpp counts;
// those over depth overlap the layers' compute (tp_3d_overlap, Loom's default).
#pragma once

#include <vector>

#include "loom/plan/layout_cost.hpp"

namespace loom::plan {

// Memory and time of a layout with a 3D grid (layout.row x col x depth > 1, tp = 1), each
// pipeline stage a grid under pp > 1 (the pipeline rank needing the most; the bubble and the
// stage outputs sent as step_time prices 1D pipelines), ring attention around the grids under
// cp > 1 (each rank's tokens 1/cp, its ring as step_time's); micro_batch is each rank's sequences,
// so a step takes global_batch / (dp x depth x micro_batch) micro-batches. Invalid with the
// reason when the grid does not divide the heads, the widths or the batch, pp x chunks the
// layers, 2 x cp the sequence, or the layout does not fit in memory.
LayoutCost predict_tensor_parallel_3d(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                                      int64_t global_batch);

// Every 3D layout of `devices` devices: dp x pp x cp x R x C x D = devices with R x C x D > 1,
// the context-parallel degrees the search tries (context_parallel_degrees), the space's chunks
// (pp > 1), micro-batch sizes and recompute choices (valid and invalid alike, unsorted).
std::vector<LayoutCost> tensor_parallel_3d_layouts(const ModelSpec& model, const ClusterSpec& cluster, int64_t devices,
                                                   int64_t global_batch, const SearchSpace& space);

// The fastest valid layout with a 3D grid and the fastest without, of a search's result
// (nullptr where it has none).
struct BestOfEach {
  const LayoutCost* one_d = nullptr;
  const LayoutCost* three_d = nullptr;
};
BestOfEach best_of_each(const std::vector<LayoutCost>& ranked);

}  // namespace loom::plan
