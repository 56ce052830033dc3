// Bytes one rank's 3D tensor-parallel collectives move along each grid axis in a training step
// of a GPT (AxoNN's 3D parallel matrix multiply as parallel/tensor_parallel_3d builds it), as
// comm::ProcessGroup counts them: an all-reduce its buffer, an all-gather or reduce-scatter
// the whole (gathered, or to be scattered) buffer. Pure arithmetic:
// `loom plan` and the accounting test use it alike.
#pragma once

#include <array>

#include <cstdint>

namespace loom::plan {

struct Grid3DBytes {
  int64_t row = 0, col = 0, depth = 0;
  int64_t plane = 0;  // a mixture of experts' gathers over the plane (row x col): outputs and input gradients
  // Of row and col (index 0 and 1), what Loom's overlap runs under GEMMs: the forward's partial
  // outputs, summed piece by piece under the next piece's GEMM, and the backward's input
  // gradients, summed and gathered under the dW GEMM. The rest (a pair's forward gather of its
  // whole output, a serial layer's gathers) waits on the critical path.
  std::array<int64_t, 2> forward_sums{}, under_weight_gradient{};
};

struct Gpt3DShape {
  int64_t B = 1, T = 1;  // this rank's micro-batch: B sequences of T tokens
  int64_t C = 1, L = 1;  // width, transformer blocks
  int64_t Vp = 1, block_size = 1;  // token table rows, position table rows
  int64_t M = 1;  // micro-batches per step
  // Of the L blocks, those whose MLP is a mixture of E experts (top-K), shared out over the
  // plane's `expert_split` ranks (parallel::tp3d::Layers3D::expert_split; 1: whole on each).
  int64_t moe_blocks = 0, experts = 0, top_k = 0, expert_split = 1;
};

// Per layer (N = B x T rows, weight out x in, the input split over axis pi, the output over
// po, depth D), once per micro-batch: the weight's block all-gathered over depth in forward
// and again in backward and its gradient reduce-scattered (3 x out in / (pi po)); the partial
// output all-reduced over the input axis (N out / po) and the partial input gradient over the
// output axis (N in / pi); a pair's first layer gathers its whole input gradient over col
// (N in), its second its whole output (N out). A layer that does not divide the grid stays
// serial and gathers only what crosses the row split (N x those features). Once per step, every gradient not
// split over depth is averaged over it (embedding, position table, LayerNorms, biases, the
// serial layers' weights). A collective on an axis of one rank moves nothing. A mixture of
// experts' block has no 3D MLP: its router and its experts are averaged over depth like the
// replicated parameters, and with its experts shared out over the plane it gathers every routed
// row's output in forward and input gradient in backward (N K rows each, dropless), at the
// activations' size; its routing statistics are added over depth (E + 4 fp32 values a step).
// activation_bytes: a value of the activations and of the weights gathered over depth (2 in
// bf16: they cross in bf16); gradient_bytes: one of the gradients reduce-scattered and
// averaged over depth (4: Loom reduces them in fp32 in either precision).
Grid3DBytes tensor_parallel_3d_bytes_per_step(const Gpt3DShape& shape, int64_t R, int64_t Cg, int64_t D,
                                              int64_t activation_bytes = 4, int64_t gradient_bytes = 4);

}  // namespace loom::plan
