// Under sequence parallelism each rank computes the LayerNorm, position-embedding and
// row-parallel-bias gradients from its own chunk of the sequence only, so these replicated
// parameters' gradients are partial: sum them over the tensor-parallel group as each becomes
// ready (before data parallelism reduces it), so every replica steps alike.
#pragma once

#include "loom/comm/process_group.hpp"
#include "loom/nn/module.hpp"

namespace loom::parallel::tp {

// Adds a grad-ready hook to every parameter of model not split across group; install it
// before DDP or ZeRO so it runs first.
void sum_replicated_gradients(nn::Module& model, comm::ProcessGroup& group);

}  // namespace loom::parallel::tp
