// The activations a rank of a 3D tensor-parallel grid (parallel/tensor_parallel_3d) holds at
// its peak in a training step of a GPT, as its memory tracker counts them. Each block keeps,
// of this rank's B rows: the LayerNorms' whole inputs and statistics; the qkv and fc inputs
// sliced over col (whole where the layer stays serial); attention's q, k, v and probabilities
// (or, in bf16, each row's log-sum-exp) of the heads over row; the projection's input split
// over row; the MLP's hidden values over row. Which moment peaks depends on the shapes, so each
// candidate is counted and the largest taken: the head's backward (every block held, the
// logits, the final LayerNorm's tensors), the last block's MLP projection backward (its input
// gradient), its attention backward (bf16: the recomputed probabilities of a group of heads),
// and the forward of that projection (under recompute: the block replayed in backward); under
// sequence parallelism also fc's backward. The memory check (train::rank_training_memory) and
// `loom plan --tp-3d on` count the same bytes. A whole model on a rank of 1D tensor parallelism
// is the grid row = tp, col = 1 with V its rows of the vocabulary (the serial run: 1 x 1), under
// sequence parallelism seq = tp, under context parallelism ring = cp and T its tokens
// (plan::loom_rank_activation_bytes).
#pragma once

#include <array>
#include <cstdint>

namespace loom::plan {

struct Grid3DActivationShape {
  int64_t B = 1, T = 1, C = 1, NH = 1, L = 1, V = 1;  // rows, tokens, width, heads, blocks, token table rows held
  int64_t row = 1, col = 1;                            // the grid's axes that split activations (depth splits weights)
  int64_t seq = 1;  // sequence parallelism: the ranks the LayerNorms' and residual stream's tokens are split over
  int64_t ring = 1;  // context parallelism: the ranks of ring attention's ring (T is this rank's tokens); 1: none
  bool bf16 = false, recompute = false;
  // Selective recompute: fp32 attention keeps no probabilities; its backward recomputes them
  // into two scratches of a group of heads' scores (the probabilities and their gradient).
  bool selective = false;
  // Hidden dropout: each branch's backward gets a masked copy of its incoming gradient (one more
  // fp32 tensor of the residual stream's in the MLP's and the attention's backward).
  bool dropout = false;
  // A pipeline chunk of L blocks may hold neither the embedding nor the head (the logits, the
  // final LayerNorm); a whole model holds both.
  bool embedding = true, head = true;
  // Which of a block's Linears the grid splits (qkv, attention's projection, fc, the MLP's
  // projection); a layer whose shapes do not divide the grid stays serial on whole features.
  std::array<bool, 4> split{true, true, true, true};
};

// Ring attention's backward (ring > 1) beside q, k and v's gradient: its kept output, in bf16
// the widened copies, the rows' deltas, a group of heads' scores and their gradient, five K/V
// buffers (of this rank's row of heads).
int64_t ring_attention_backward_bytes(const Grid3DActivationShape& s);
// What one block keeps for backward on a grid rank (without recompute).
int64_t grid_3d_layer_activation_bytes(const Grid3DActivationShape& s);
// Of that, what its dense MLP keeps (fc's input over col, the pre-activation over row and the
// projection's input): a mixture of experts keeps its own tensors in their place.
int64_t grid_3d_mlp_activation_bytes(const Grid3DActivationShape& s);
// One micro-batch through the blocks (and the embedding and head it holds) of shape s: what it
// keeps from its forward to its backward, and the most held at once while its forward runs and
// while its backward runs, its own kept bytes and received input or gradient included.
struct ChunkActivationPeaks {
  int64_t kept = 0, forward = 0, backward = 0;
};
ChunkActivationPeaks grid_3d_chunk_activation_peaks(const Grid3DActivationShape& s);
// The rank's peak activation bytes over a step of one micro-batch.
int64_t grid_3d_activation_bytes(const Grid3DActivationShape& s);

}  // namespace loom::plan
