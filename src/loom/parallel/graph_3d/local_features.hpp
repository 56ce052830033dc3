// This rank's shard of a graph's node features on a Plexus-style 3D grid, read from the
// features streamed once (data::GraphSource::for_each_feature_row) so that no rank holds the
// whole N x F matrix: the rows of the first layer's input shard, each prepared whole (the row
// normalisation needs all of its values) before the shard keeps its columns. Values are those
// GraphConv3D::input_shard cuts from the whole prepared matrix, bit for bit.
#pragma once

#include <cstdint>
#include <functional>

#include "loom/data/graph.hpp"
#include "loom/parallel/graph_3d/graph_conv_3d.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom::parallel::graph3d {

// first: the model's first layer; prepare(row, F) changes one whole row in place. An error
// reading on any rank fails every rank (read_agreement.hpp) before they go on.
Tensor read_input_shard(const GraphConv3D& first, data::GraphSource& source,
                        const std::function<void(float* row, int64_t features)>& prepare);

}  // namespace loom::parallel::graph3d
